#pragma once

#include <cstdint>

namespace caflm {

/// Index of a token in a model's vocabulary.
using TokenId = std::uint32_t;

} // namespace caflm
