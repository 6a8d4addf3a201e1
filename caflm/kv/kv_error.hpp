#pragma once

#include <cstdint>

namespace caflm {

/// Why a KV-cache bookkeeping operation failed. Every failing operation
/// leaves the pool and the tables exactly as they were.
enum class KvError : std::uint8_t {
  /// No free block is left in the pool.
  Exhausted,
  /// The block id is out of range, or names a block that is not allocated.
  InvalidBlock,
  /// The block was released more often than it was referenced.
  DoubleRelease,
  /// The block's reference count would overflow.
  ReferenceOverflow,
  /// The logical page lies beyond the table's end or capacity.
  PageOutOfRange,
  /// The operation needs an empty block table.
  TableNotEmpty,
};

/// A short English description, for logs and error messages.
const char* to_string(KvError error);

} // namespace caflm
