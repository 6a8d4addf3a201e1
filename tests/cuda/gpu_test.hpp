#pragma once

// What the GPU test cases of tests/cuda/ share: the check they start with
// (without a usable device a case passes with a warning naming the reason, so
// the suite runs everywhere the CUDA backend builds) and device arrays.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/cuda_device.hpp"

/// Returns from the test case, with "skipped: <reason>", when no CUDA device
/// is usable.
#define CAFLM_REQUIRE_GPU()                                                                        \
  do {                                                                                             \
    const std::string caflm_gpu_reason = caflm::cuda::cuda_unavailable_reason();                   \
    if (!caflm_gpu_reason.empty()) {                                                               \
      WARN("skipped: " << caflm_gpu_reason);                                                       \
      return;                                                                                      \
    }                                                                                              \
  } while (false)

namespace caflm::testing {

/// The path in environment variable `name` when it is set and not empty,
/// else `built_in` (the build tree's path, compiled in). scripts/gpu-check.sh
/// --prebuilt runs the GPU tests on a machine where the build's paths do not
/// exist and names the test data and the caflm binary this way.
inline std::string path_from_env(const char* name, const char* built_in) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : built_in;
}

/// `count` T of device memory, freed with this object.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count)
    : count_(count) {
    CAFLM_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(count, 1) * sizeof(T)));
  }
  /// A copy of `host` on the device.
  explicit DeviceArray(const std::vector<T>& host)
    : DeviceArray(host.size()) {
    upload(host);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  T* get() const { return data_; }
  std::size_t size() const { return count_; }

  void upload(const T* host, std::size_t count) {
    CAFLM_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  /// Waits for the device, then copies the array back.
  std::vector<T> download() const {
    CAFLM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    CAFLM_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

} // namespace caflm::testing
