#include "caflm/cuda/device_buffer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

namespace caflm::cuda {

DeviceBuffer::DeviceBuffer(std::uint64_t bytes, const char* what) {
  const cudaError_t status = cudaMalloc(&data_, std::max<std::uint64_t>(bytes, 1));
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("cannot allocate ") + std::to_string(bytes) +
                             " bytes of device memory for " + what + ": " +
                             cudaGetErrorString(status));
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr)
    cudaFree(data_);
}

void DeviceBuffer::swap(DeviceBuffer& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
}

} // namespace caflm::cuda
