#pragma once

#include <string>

namespace caflm::apps {

/// The allocator behind this program's malloc, as a bench report names it:
/// "jemalloc <version>" where the build linked jemalloc (CAFLM_USE_JEMALLOC)
/// and it serves this thread's allocations, else "system malloc".
std::string allocator_in_use();

} // namespace caflm::apps
