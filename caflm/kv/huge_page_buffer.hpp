#pragma once

#include <cstddef>
#include <cstdint>

namespace caflm {

/// A zeroed byte buffer that asks Linux for 2 MiB pages (transparent huge
/// pages, madvise mode). Attention reads a sequence's KV blocks from all over
/// the cache, a few KiB at a time: with 4 KiB pages nearly every block costs
/// a TLB miss and a page walk, with 2 MiB pages a block's neighbourhood
/// shares one entry. Where the kernel declines, the buffer works all the
/// same on small pages. Move-only.
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  /// Throws std::bad_alloc when the memory cannot be mapped.
  explicit HugePageBuffer(std::size_t bytes);
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void release();

  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0; // size_ rounded up to whole huge pages
};

} // namespace caflm
