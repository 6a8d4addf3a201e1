#pragma once

#include <array>
#include <cstdint>

namespace caflm {

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
/// counter-based generator of Random123 and cuRAND: a keyed bijection of a 128-bit counter. A draw
/// depends only on (key, counter), so a sampler needs no state to resume anywhere.
inline std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                                  std::array<std::uint32_t, 2> key) {
  constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
  constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u; // golden ratio
  constexpr std::uint32_t kWeyl1 = 0xBB67AE85u; // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const std::uint64_t product0 = std::uint64_t{kMultiplier0} * counter[0];
    const std::uint64_t product1 = std::uint64_t{kMultiplier1} * counter[2];
    const auto hi0 = static_cast<std::uint32_t>(product0 >> 32);
    const auto lo0 = static_cast<std::uint32_t>(product0);
    const auto hi1 = static_cast<std::uint32_t>(product1 >> 32);
    const auto lo1 = static_cast<std::uint32_t>(product1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
  }
  return counter;
}

/// A uniform float in [0, 1) that depends only on (seed, step, lane): the seed is the Philox key,
/// (step, lane) the counter. Step i of a request draws the same number wherever it runs, so a
/// request resumed on another replica continues identically.
inline float counter_uniform(std::uint64_t seed, std::uint64_t step, std::uint32_t lane = 0) {
  const auto bits = philox4x32_10(
      {static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32), lane, 0u},
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  // The top 24 bits fill a float's mantissa exactly: multiples of 2^-24, never 1.0.
  return static_cast<float>(bits[0] >> 8) * (1.0f / 16777216.0f);
}

} // namespace caflm
