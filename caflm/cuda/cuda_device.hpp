#pragma once

#include <cstddef>
#include <string>
#include <vector>

// The CUDA devices this process can use. Plain C++: any layer above cuda/ may
// include it without the CUDA headers.

namespace caflm::cuda {

/// One CUDA device as the runtime reports it.
struct CudaDeviceInfo {
  int index = 0;               ///< the runtime's device ordinal
  std::string name;            ///< e.g. "NVIDIA H200"
  int sm_major = 0;            ///< compute capability, e.g. 9 for sm_90
  int sm_minor = 0;            ///< e.g. 0 for sm_90
  std::size_t total_bytes = 0; ///< device memory
  std::size_t free_bytes = 0;  ///< device memory free when queried
};

/// Every usable CUDA device; empty when there is no driver, no device, or the
/// runtime cannot use them (the reason is cuda_unavailable_reason()). Never
/// throws for a missing driver or device.
std::vector<CudaDeviceInfo> cuda_devices();

/// "" when at least one CUDA device is usable; otherwise why not, e.g. "no
/// CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected".
/// Non-empty exactly when cuda_devices() is empty.
std::string cuda_unavailable_reason();

} // namespace caflm::cuda
