#pragma once

#include <cstdint>

namespace caflm {

/// Index of a token in a model's vocabulary. The layers that do not depend on
/// kv/ (sampling/, text/) declare the same alias; redeclaring an identical
/// alias is legal C++, so their headers mix in any order.
using TokenId = std::uint32_t;

} // namespace caflm
