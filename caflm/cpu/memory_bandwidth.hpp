#pragma once

#include <cstddef>

namespace caflm {

/// A streaming read of a buffer much larger than the caches, split over the
/// CPU runner's OpenMP threads, on huge pages where the kernel grants them:
/// the read bandwidth a memory-bound decode step could reach on this
/// machine, to compare the achieved one against. Returns bytes per second,
/// the best of `repeats` passes over `bytes` (rounded down to whole 64-byte
/// lines; at least one line) of a plain read and of one that asks the
/// caches ahead.
double measure_read_bandwidth(std::size_t bytes = std::size_t{512} << 20, int repeats = 5);

} // namespace caflm
