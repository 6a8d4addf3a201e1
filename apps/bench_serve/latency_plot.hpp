#pragma once

// The picture `caflm bench-serve --plot FILE.png` draws: rolling latency
// percentiles against time, rasterised here and written as a PNG (zlib's
// deflate, nothing else).

#include <cstdint>
#include <string>
#include <vector>

#include "apps/bench_serve/load_generator.hpp"

namespace caflm::apps::bench_serve {

/// `rgb` ([height, width, 3] bytes, rows top first) as a PNG file's bytes:
/// 8-bit truecolour, no interlace, filter 0 on every row.
std::string encode_png(std::uint32_t width, std::uint32_t height,
                       const std::vector<std::uint8_t>& rgb);

/// Writes `path`: two panels over the run's time in seconds, TTFT above and
/// inter-token latency below, each with its p50, p90 and p99 in a window
/// sliding over time (a tenth of the run). A request's TTFT counts at its
/// completion, a gap between chunks at the later chunk. Throws
/// std::runtime_error when the file cannot be written.
void write_latency_plot(const std::string& path, const std::vector<RequestOutcome>& outcomes);

} // namespace caflm::apps::bench_serve
