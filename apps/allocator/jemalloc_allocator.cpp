// jemalloc as the allocator of caflm's own programs (built where CMake finds
// it, see CAFLM_USE_JEMALLOC). The library does not choose: a program that
// embeds caflm links the allocator it wants.
//
// Why: the token path frees on one thread what another allocated (each step's
// TokenBatch, a finished request's actor), and glibc's malloc takes its
// arenas' locks for that and trims and regrows its heaps as requests come and
// go. bench_actor_pipeline (null backend, 256 requests in flight, 2-core Zen 5,
// alternated runs) went from 0.87-0.88M to 1.18-1.30M tokens/s in one process
// and from 0.58-0.60M to 0.71-0.72M across the middleman with jemalloc in
// place of glibc's malloc.
//
// jemalloc keeps its defaults. Returning freed pages sooner (no retained
// address space, 100 ms of decay) cost 10-20% of those gains, through its
// madvise and munmap calls; where a figure should count only what the
// program holds, release_free_memory() hands the freed pages back first.

#include "apps/allocator/allocator.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <jemalloc/jemalloc.h>

namespace caflm::apps {

namespace {

std::uint64_t thread_allocated_bytes() {
  std::uint64_t bytes = 0;
  std::size_t size = sizeof(bytes);
  return mallctl("thread.allocated", &bytes, &size, nullptr, 0) == 0 ? bytes : 0;
}

} // namespace

void release_free_memory() {
  // This thread's cache first, then every arena (MALLCTL_ARENAS_ALL).
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  const std::string purge_all = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
  mallctl(purge_all.c_str(), nullptr, nullptr, nullptr, 0);
}

std::string allocator_in_use() {
  // Linked is not enough: another library loaded before jemalloc could
  // still own malloc. jemalloc counts only the allocations it serves.
  const std::uint64_t before = thread_allocated_bytes();
  void* volatile probe = std::malloc(4096);
  const std::uint64_t after = thread_allocated_bytes();
  std::free(probe);
  if (after < before + 4096)
    return "system malloc";
  const char* version = nullptr;
  std::size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) != 0 || version == nullptr)
    return "jemalloc";
  // "5.3.0-0-g<commit>": the release is what a reader compares.
  const std::string full = version;
  return "jemalloc " + full.substr(0, full.find('-'));
}

} // namespace caflm::apps
