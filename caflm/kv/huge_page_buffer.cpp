#include "caflm/kv/huge_page_buffer.hpp"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <utility>

namespace caflm {

namespace {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

} // namespace

HugePageBuffer::HugePageBuffer(std::size_t bytes)
  : size_(bytes)
  , mapped_((bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes) {
  if (mapped_ == 0)
    return;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw std::bad_alloc();
  data_ = static_cast<std::uint8_t*>(p);
  // Advice only: a kernel without transparent huge pages says no, and small
  // pages serve.
  madvise(p, mapped_, MADV_HUGEPAGE);
  // Touched now, as a vector would be, so that no step pays the page faults.
  std::memset(p, 0, mapped_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
  : data_(std::exchange(other.data_, nullptr))
  , size_(std::exchange(other.size_, 0))
  , mapped_(std::exchange(other.mapped_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

HugePageBuffer::~HugePageBuffer() {
  release();
}

void HugePageBuffer::release() {
  if (data_ != nullptr)
    munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

} // namespace caflm
