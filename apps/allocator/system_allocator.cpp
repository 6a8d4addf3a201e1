// The allocator report of a build without jemalloc (CAFLM_USE_JEMALLOC off,
// or jemalloc not installed): malloc is the C library's.

#include "apps/allocator/allocator.hpp"

#include <malloc.h>

namespace caflm::apps {

void release_free_memory() {
  malloc_trim(0);
}

std::string allocator_in_use() {
  return "system malloc";
}

} // namespace caflm::apps
