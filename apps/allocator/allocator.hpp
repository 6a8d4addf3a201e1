#pragma once

#include <string>

namespace caflm::apps {

/// The allocator behind this program's malloc, as a bench report names it:
/// "jemalloc <version>" where the build linked jemalloc (CAFLM_USE_JEMALLOC)
/// and it serves this thread's allocations, else "system malloc".
std::string allocator_in_use();

/// Hands the pages of freed memory back to the system now, rather than
/// when the allocator would (jemalloc: after 10 s of disuse; glibc: at the
/// top of its heap only): for a resident-set figure that counts what the
/// program holds, not what it freed a moment ago.
void release_free_memory();

} // namespace caflm::apps
