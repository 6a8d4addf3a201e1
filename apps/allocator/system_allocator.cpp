// The allocator report of a build without jemalloc (CAFLM_USE_JEMALLOC off,
// or jemalloc not installed): malloc is the C library's.

#include "apps/allocator/allocator.hpp"

namespace caflm::apps {

std::string allocator_in_use() {
  return "system malloc";
}

} // namespace caflm::apps
