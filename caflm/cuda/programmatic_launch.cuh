#pragma once

// Programmatic dependent launch (Hopper, compute capability 9.0 and later):
// a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization
// may start while the kernel before it on the stream is still running, once
// every block of that kernel has called allow_next_kernel_to_start() (or
// ended). Until it calls wait_for_previous_kernel() it may only read what the
// previous kernel does not write and write nothing: the linear layer fetches
// its weight rows into L2 there, so at small batches the weights stream in
// while the norm or attention before it runs, instead of after it.
//
// Both are no-ops before compute capability 9.0, and the wait is one for a
// kernel launched without the attribute. Every kernel caflm launches
// programmatically waits before it touches memory the previous kernel may
// write, so each kernel still sees all earlier kernels ended: kernel i + 1
// waits for kernel i, which waited for kernel i - 1.

#include <cstddef>

#include <cuda_runtime.h>

#include "caflm/cuda/cuda_check.hpp"

namespace caflm::cuda {

/// Whether the current device takes programmatic launches (compute
/// capability 9.0 or later).
inline bool programmatic_launch_supported() {
  int device = 0;
  int major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

/// Launches `kernel` on `stream`; with `programmatic`, programmatically: the
/// kernel must then call wait_for_previous_kernel() before it reads or writes
/// anything the kernel before it may write. Throws std::runtime_error when
/// the launch fails.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
                   cudaStream_t stream, bool programmatic, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  CAFLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

/// Lets a programmatically launched next kernel start; harmless otherwise.
__device__ __forceinline__ void allow_next_kernel_to_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

/// Waits until the previous kernel on the stream has ended and its writes are
/// visible (at once for a kernel launched without the attribute).
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Asks L2 to hold the cache line of `p` (a hint; never faults a valid address).
__device__ __forceinline__ void prefetch_to_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

} // namespace caflm::cuda
