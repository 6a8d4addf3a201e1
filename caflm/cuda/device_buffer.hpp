#pragma once

#include <cstdint>

// Owned device memory, for the CUDA runner and the GPU benchmarks. This
// header includes nothing of CUDA's; only caflm/cuda/ and its users include it.

namespace caflm::cuda {

/// A device allocation freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` (at least 1) of device memory. Throws
  /// std::runtime_error naming `what` and the runtime's message when it
  /// cannot.
  DeviceBuffer(std::uint64_t bytes, const char* what);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~DeviceBuffer();

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& other) noexcept;

  void* data_ = nullptr;
  std::uint64_t bytes_ = 0;
};

} // namespace caflm::cuda
