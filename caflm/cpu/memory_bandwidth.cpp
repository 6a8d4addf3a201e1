#include "caflm/cpu/memory_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <omp.h>
#include <stdexcept>

#include "caflm/kv/huge_page_buffer.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace caflm {

namespace {

constexpr std::size_t kLine = 64;

// How far ahead of its loads the prefetching read asks L1 for lines.
constexpr std::size_t kLookaheadFloats = 1024 / sizeof(float);

/// Sums a range of 64-byte lines so that the compiler cannot drop the
/// reads, asking L1 for the lines kLookaheadFloats ahead where kPrefetch
/// says so. // [lines * 16] floats
template <bool kPrefetch>
float sum_lines(const float* __restrict__ data, std::size_t lines) {
#if defined(__AVX2__)
  // Four independent accumulators keep several loads in flight.
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  __m256 c = _mm256_setzero_ps(), d = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 2 <= lines; i += 2) {
    const float* p = data + i * 16;
    if constexpr (kPrefetch) {
      // Past the end too: a prefetch never faults.
      _mm_prefetch(reinterpret_cast<const char*>(p + kLookaheadFloats), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + kLookaheadFloats + 16), _MM_HINT_T0);
    }
    a = _mm256_add_ps(a, _mm256_load_ps(p));
    b = _mm256_add_ps(b, _mm256_load_ps(p + 8));
    c = _mm256_add_ps(c, _mm256_load_ps(p + 16));
    d = _mm256_add_ps(d, _mm256_load_ps(p + 24));
  }
  for (; i < lines; ++i) {
    a = _mm256_add_ps(a, _mm256_load_ps(data + i * 16));
    b = _mm256_add_ps(b, _mm256_load_ps(data + i * 16 + 8));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  float total = 0.0f;
  for (float lane : lanes)
    total += lane;
  return total;
#else
  float total = 0.0f;
  for (std::size_t i = 0; i < lines * 16; ++i)
    total += data[i];
  return total;
#endif
}

/// The best of `repeats` passes of sum_lines<kPrefetch> over `lines` lines
/// split over the OpenMP threads, in bytes per second.
template <bool kPrefetch>
double best_read(const float* data, std::size_t lines, int repeats) {
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int pass = 0; pass < repeats; ++pass) {
    float total = 0.0f;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total)
    {
      const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t thread = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t begin = lines * thread / threads;
      const std::size_t end = lines * (thread + 1) / threads;
      total += sum_lines<kPrefetch>(data + begin * 16, end - begin);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sink = sink + total;
    best = std::max(best, double(lines * kLine) / seconds);
  }
  (void)sink;
  return best;
}

} // namespace

double measure_read_bandwidth(std::size_t bytes, int repeats) {
  if (repeats < 1)
    throw std::invalid_argument("measure_read_bandwidth: at least one pass");
  const std::size_t lines = std::max<std::size_t>(bytes / kLine, 1);
  // On 2 MiB pages where Linux grants them, as the page cache maps a large
  // model file (ext4 and tmpfs hand out large folios): on 4 KiB pages the
  // read measures the TLB as much as the memory, and a decode step over the
  // mapped weights ran faster than it (measured on a 2-core Xeon VM: 22 GB/s
  // on small pages, 29 on huge ones, 35 prefetching, a 1.5 GB F32 model's
  // decode reading 26).
  HugePageBuffer buffer(lines * kLine);
  const auto* data = reinterpret_cast<const float*>(buffer.data());
  // Some cores stream at the memory's pace on their own prefetchers, others
  // only when asked ahead: the machine's bandwidth is the better of the two.
  return std::max(best_read<false>(data, lines, repeats), best_read<true>(data, lines, repeats));
}

} // namespace caflm
