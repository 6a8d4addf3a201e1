#include "caflm/cuda/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

namespace caflm::cuda {

namespace {

/// "CALL: MESSAGE" for a failed runtime call.
std::string describe(const char* call, cudaError_t status) {
  return std::string(call) + ": " + cudaGetErrorString(status);
}

/// The usable devices, or the reason there are none in `reason`. Runtime
/// errors are results here, not exceptions: a machine without a GPU is an
/// ordinary case.
std::vector<CudaDeviceInfo> probe_devices(std::string& reason) {
  std::vector<CudaDeviceInfo> devices;
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    // The failed call leaves a sticky "last error"; clear it so that it is
    // not reported against the caller's next launch.
    static_cast<void>(cudaGetLastError());
    reason = "no CUDA device: " + describe("cudaGetDeviceCount", status);
    return devices;
  }
  if (count == 0) {
    reason = "no CUDA device: cudaGetDeviceCount found 0 devices";
    return devices;
  }
  std::string first_failure;
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (const cudaError_t status = cudaGetDeviceProperties(&properties, index);
        status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      if (first_failure.empty()) {
        first_failure =
            "device " + std::to_string(index) + ": " + describe("cudaGetDeviceProperties", status);
      }
      continue;
    }
    CudaDeviceInfo info;
    info.index = index;
    info.name = properties.name;
    info.sm_major = properties.major;
    info.sm_minor = properties.minor;
    info.total_bytes = properties.totalGlobalMem;
    // Free memory needs a context on the device; a device that cannot
    // create one (e.g. exclusive-process mode held by another process) is
    // not usable.
    int previous = 0;
    cudaError_t status = cudaGetDevice(&previous);
    if (status == cudaSuccess) {
      status = cudaSetDevice(index);
    }
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (status == cudaSuccess) {
      status = cudaMemGetInfo(&free_bytes, &total_bytes);
      static_cast<void>(cudaSetDevice(previous));
    }
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      if (first_failure.empty()) {
        first_failure = "device " + std::to_string(index) + " (" + info.name +
                        "): " + describe("cudaMemGetInfo", status);
      }
      continue;
    }
    info.free_bytes = free_bytes;
    devices.push_back(std::move(info));
  }
  if (devices.empty()) {
    reason = "no usable CUDA device: " + first_failure;
  }
  return devices;
}

} // namespace

std::vector<CudaDeviceInfo> cuda_devices() {
  std::string reason;
  return probe_devices(reason);
}

std::string cuda_unavailable_reason() {
  std::string reason;
  probe_devices(reason);
  return reason;
}

} // namespace caflm::cuda
