#include "caflm/cuda/cuda_device.hpp"

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

using caflm::cuda::cuda_devices;
using caflm::cuda::cuda_unavailable_reason;

TEST_CASE("cuda_unavailable_reason is non-empty exactly when there is no usable device") {
  std::vector<caflm::cuda::CudaDeviceInfo> devices;
  std::string reason;
  REQUIRE_NOTHROW(devices = cuda_devices());
  REQUIRE_NOTHROW(reason = cuda_unavailable_reason());
  CHECK(devices.empty() == !reason.empty());
  if (!reason.empty()) {
    INFO("reason: " << reason);
    // The reason says what is missing and which runtime call said so.
    CHECK(reason.find("CUDA device") != std::string::npos);
    CHECK(reason.find("cuda") != std::string::npos);
  }
}

TEST_CASE("cuda_devices agrees with the runtime's device count") {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  static_cast<void>(cudaGetLastError());
  const auto devices = cuda_devices();
  if (status != cudaSuccess) {
    // No driver or no device: the probe must say so and list nothing.
    CHECK(devices.empty());
    const std::string reason = cuda_unavailable_reason();
    INFO("reason: " << reason);
    CHECK(reason.find(cudaGetErrorString(status)) != std::string::npos);
    CHECK(reason.find("cudaGetDeviceCount") != std::string::npos);
    return;
  }
  REQUIRE(devices.size() <= static_cast<size_t>(count));
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& device = devices[i];
    INFO("device " << device.index << ": " << device.name);
    CHECK(device.index >= 0);
    CHECK(device.index < count);
    if (i > 0) {
      CHECK(device.index > devices[i - 1].index);
    }
    CHECK(!device.name.empty());
    CHECK(device.sm_major >= 1);
    CHECK(device.total_bytes > 0);
    CHECK(device.free_bytes <= device.total_bytes);
  }
}

TEST_CASE("the probe leaves no error behind for the caller's next CUDA call") {
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty()) {
    // Without a driver every runtime call reports the same initialization
    // error, whatever the probe did.
    WARN("skipped: " << reason);
    return;
  }
  static_cast<void>(cuda_devices());
  CHECK(cudaGetLastError() == cudaSuccess);
}
