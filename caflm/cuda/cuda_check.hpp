#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

// Error checking of CUDA runtime calls. Every call into the runtime in
// caflm/cuda/ goes through CAFLM_CUDA_CHECK, so that a failure surfaces as an
// exception naming the call, where it was made and the runtime's message.
// This header includes the CUDA runtime API: only caflm/cuda/ includes it.

namespace caflm::cuda {

/// Throws std::runtime_error "CALL failed at FILE:LINE: NAME: MESSAGE" unless
/// `status` is cudaSuccess.
inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) {
    return;
  }
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

/// Throws for an error of the last kernel launch in this thread (a bad
/// launch configuration; errors while the kernel runs surface at the next
/// synchronizing call).
inline void check_last_launch(const char* kernel, const char* file, int line) {
  check_cuda(cudaGetLastError(), kernel, file, line);
}

} // namespace caflm::cuda

/// Checks the cudaError_t of a CUDA runtime call; throws std::runtime_error.
#define CAFLM_CUDA_CHECK(call) ::caflm::cuda::check_cuda((call), #call, __FILE__, __LINE__)

/// Checks that the kernel launch just made was accepted.
#define CAFLM_CUDA_CHECK_LAUNCH(kernel)                                                            \
  ::caflm::cuda::check_last_launch("launch of " #kernel, __FILE__, __LINE__)
