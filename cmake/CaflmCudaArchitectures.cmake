# caflm_default_cuda_architectures() chooses CMAKE_CUDA_ARCHITECTURES when the
# user has not (neither -DCMAKE_CUDA_ARCHITECTURES nor the CUDAARCHS
# environment variable): `native` when a CUDA device is usable on this
# machine, `90` (the H100/H200 generation) otherwise. It must run after
# find_package(CUDAToolkit) and before enable_language(CUDA): CMake 3.25 fails
# in enable_language when `native` finds no device, so this probes first by
# building and running a program that asks the CUDA runtime for its devices.
function(caflm_default_cuda_architectures)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
    return()
  endif()
  set(architectures 90)
  set(reason "no usable CUDA device")
  if(CMAKE_CROSSCOMPILING)
    set(reason "cross-compiling: the device cannot be probed")
  else()
    set(probe_source ${CMAKE_BINARY_DIR}/CMakeFiles/caflm_cuda_device_probe.cpp)
    file(WRITE ${probe_source} [=[
#include <cuda_runtime_api.h>
#include <cstdio>
int main() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    std::printf("cudaGetDeviceCount: %s", cudaGetErrorString(status));
    return 1;
  }
  std::printf("%d device(s)", count);
  return count > 0 ? 0 : 1;
}
]=])
    try_run(probe_exit probe_compiled ${CMAKE_BINARY_DIR}/CMakeFiles/caflm_cuda_device_probe
      ${probe_source}
      LINK_LIBRARIES CUDA::cudart
      COMPILE_OUTPUT_VARIABLE probe_compile_output
      RUN_OUTPUT_VARIABLE probe_output)
    if(NOT probe_compiled)
      set(reason "the device probe did not build")
    elseif(probe_exit EQUAL 0)
      set(architectures native)
      set(reason "${probe_output}")
    else()
      set(reason "${probe_output}")
    endif()
  endif()
  message(STATUS "caflm: CUDA architectures ${architectures} (${reason})")
  set(CMAKE_CUDA_ARCHITECTURES ${architectures} CACHE STRING
    "CUDA architectures to build for (caflm's default: native with a device, else 90)")
endfunction()
