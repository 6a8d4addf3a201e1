#include "caflm/cpu/memory_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <omp.h>
#include <stdexcept>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace caflm {

namespace {

constexpr std::size_t kLine = 64;

/// Sums a range of 64-byte lines so that the compiler cannot drop the
/// reads. // [lines * 16] floats
float sum_lines(const float* __restrict__ data, std::size_t lines) {
#if defined(__AVX2__)
  // Four independent accumulators keep several loads in flight.
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  __m256 c = _mm256_setzero_ps(), d = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 2 <= lines; i += 2) {
    const float* p = data + i * 16;
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

} // namespace

double measure_read_bandwidth(std::size_t bytes, int repeats) {
  if (repeats < 1)
    throw std::invalid_argument("measure_read_bandwidth: at least one pass");
  const std::size_t lines = std::max<std::size_t>(bytes / kLine, 1);
  const std::size_t floats = lines * 16;
  std::unique_ptr<float[], void (*)(void*)> buffer(
      static_cast<float*>(std::aligned_alloc(kLine, lines * kLine)), std::free);
  if (!buffer)
    throw std::bad_alloc();
    // Each thread touches its own share first, so its pages are local to it.
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < floats; ++i)
    buffer[i] = 1.0f;
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
      total += sum_lines(buffer.get() + begin * 16, end - begin);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sink = sink + total;
    best = std::max(best, double(lines * kLine) / seconds);
  }
  (void)sink;
  return best;
}

} // namespace caflm
