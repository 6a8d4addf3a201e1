#include "caflm/cpu/cpu_matmul.hpp"

#include "caflm/cpu/float_matmul_kernels.hpp"
#include "caflm/cpu/quantized_matmul.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace caflm {

namespace {

/// 8 float lanes.
struct Avx2Simd {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  static constexpr int kRegisters = 16;
  static V zero() { return _mm256_setzero_ps(); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V load_x(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* to, V v) { _mm256_storeu_ps(to, v); }
  static V load_x_partial(const float* x, size_t r) { return _mm256_maskload_ps(x, tail_mask(r)); }
  static float hsum(V v) { return hsum8(v); }
  static __m128 hsum4(V a, V b, V c, V d) { return hsum8x4(a, b, c, d); }
};

// Loads 8 consecutive weights of one row as f32. `load_partial` loads the
// first r < 8 and zeroes the rest.
struct F32Weights {
  static constexpr size_t kBytes = 4; // per weight
  static __m256 load(const uint8_t* row, size_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + k, tail_mask(r));
  }
};

struct F16Weights {
  static constexpr size_t kBytes = 2;
  static __m256 load(const uint8_t* row, size_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, row + 2 * k, 2 * r);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};

struct Bf16Weights {
  static constexpr size_t kBytes = 2;
  static __m256 widen(__m128i bf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
  }
  static __m256 load(const uint8_t* row, size_t k) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, row + 2 * k, 2 * r);
    return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};

/// Block widths for 4, 3, 2 and 1 rows: 12 accumulators at most, of 16
/// ymm registers.
struct Avx2Shapes {
  static constexpr int NR4 = 3, NR3 = 4, NR2 = 6, NR1 = 8;
};

bool is_float_type(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
}

detail::FloatProblem float_problem(const WeightView& w, const float* x, float* y,
                                   const float* bias) {
  detail::FloatProblem p{};
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_row_bytes = tensor_row_bytes(w.type, w.cols);
  p.x = x;
  p.k = w.cols;
  p.n = w.rows;
  p.y = y;
  p.bias = bias;
  return p;
}

/// `count` (at most kMaxFloatProblems) products of `type` weights with the
/// same m > 0 rows, with the kernels of `isa`, in one parallel loop.
void float_linear(MatmulIsa isa, TensorType type, const detail::FloatProblem* problems,
                  size_t count, size_t m) {
  if (isa == MatmulIsa::Avx512 || isa == MatmulIsa::Amx) {
    if (!matmul_isa_supported(isa)) {
      throw std::invalid_argument(std::string("linear: this CPU cannot run the ") + to_string(isa) +
                                  " kernels");
    }
    detail::float_linear_avx512(type, problems, count, m);
    return;
  }
  run_float_tiles_of<Avx2Simd, Avx2Shapes, F32Weights, F16Weights, Bf16Weights>(type, problems,
                                                                                count, m);
}

} // namespace

const char* to_string(MatmulIsa isa) {
  switch (isa) {
  case MatmulIsa::Avx2:
    return "avx2";
  case MatmulIsa::Avx512:
    return "avx512";
  case MatmulIsa::Amx:
    break;
  }
  return "amx";
}

namespace {

bool avx512_supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

/// AMX-TILE and AMX-INT8 in CPUID, their state enabled by the OS (XCR0 bits
/// 17 and 18), and Linux's per-process permission for the tile data granted
/// (arch_prctl ARCH_REQ_XCOMP_PERM; until then a tile instruction faults).
bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) {
      return false;
    }
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) {
      return false;
    }
    constexpr unsigned kAmxTile = 1u << 24, kAmxInt8 = 1u << 25;
    if ((edx & kAmxTile) == 0 || (edx & kAmxInt8) == 0) {
      return false;
    }
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    constexpr unsigned kTileState = (1u << 17) | (1u << 18);
    if ((xcr0_low & kTileState) != kTileState) {
      return false;
    }
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

} // namespace

bool matmul_isa_supported(MatmulIsa isa) {
  switch (isa) {
  case MatmulIsa::Avx2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case MatmulIsa::Avx512:
    return avx512_supported();
  case MatmulIsa::Amx:
    break;
  }
  return avx512_supported() && amx_usable();
}

MatmulIsa default_matmul_isa() {
  static const MatmulIsa isa = [] {
    const char* env = std::getenv("CAFLM_MATMUL_ISA");
    const std::string_view forced = env != nullptr ? env : "";
    if (forced == "avx2") {
      return MatmulIsa::Avx2;
    }
    if (forced != "avx512" && matmul_isa_supported(MatmulIsa::Amx)) {
      return MatmulIsa::Amx;
    }
    return matmul_isa_supported(MatmulIsa::Avx512) ? MatmulIsa::Avx512 : MatmulIsa::Avx2;
  }();
  return isa;
}

void linear(const WeightView& w, const float* __restrict__ x, size_t m, float* __restrict__ y,
            const float* __restrict__ bias) {
  linear(w, x, m, y, bias, default_matmul_isa());
}

void linear_shared_input(const float* __restrict__ x, size_t m,
                         std::initializer_list<LinearOutput> outputs) {
  linear_shared_input(x, m, outputs, default_matmul_isa());
}

void linear_shared_input(const float* __restrict__ x, size_t m,
                         std::initializer_list<LinearOutput> outputs, MatmulIsa isa) {
  // One slot per activation format (Q8_0, Q8_1, Q8_K), filled by the first
  // weight of this call that takes it.
  thread_local detail::QuantizedActivations slots[3];
  bool filled[3] = {false, false, false};
  // Float weights of one type run together, in one parallel loop, and the
  // quantized ones in one parallel region.
  detail::FloatProblem floats[kMaxFloatProblems];
  size_t n_floats = 0;
  TensorType float_type = TensorType::F32;
  const auto run_floats = [&] {
    if (n_floats > 0)
      float_linear(isa, float_type, floats, n_floats, m);
    n_floats = 0;
  };
  constexpr size_t kMaxQuantized = 4;
  detail::QuantizedOutput quantized[kMaxQuantized];
  size_t n_quantized = 0;
  const auto run_quantized = [&] {
    detail::quantized_linear_shared(isa, quantized, n_quantized);
    n_quantized = 0;
  };
  for (const LinearOutput& out : outputs) {
    const WeightView& w = *out.w;
    if (is_float_type(w.type)) {
      if (m == 0 || w.rows == 0)
        continue;
      if (n_floats == kMaxFloatProblems || (n_floats > 0 && w.type != float_type))
        run_floats();
      float_type = w.type;
      floats[n_floats++] = float_problem(w, x, out.y, out.bias);
      continue;
    }
    if (m == 0) {
      linear(w, x, m, out.y, out.bias, isa);
      continue;
    }
    if (!matmul_isa_supported(isa)) {
      throw std::invalid_argument(std::string("linear: this CPU cannot run the ") + to_string(isa) +
                                  " kernels");
    }
    detail::check_quantized_weight(w);
    const TensorType act = detail::activation_type(w.type);
    const std::size_t slot = act == TensorType::Q8_0 ? 0 : act == TensorType::Q8_1 ? 1 : 2;
    if (!filled[slot] || slots[slot].k() != w.cols || slots[slot].m() != m) {
      // Outputs waiting on this slot's rows run before they are replaced.
      if (filled[slot])
        run_quantized();
      slots[slot].quantize(act, x, m, w.cols);
      filled[slot] = true;
    }
    if (n_quantized == kMaxQuantized)
      run_quantized();
    quantized[n_quantized++] = detail::QuantizedOutput{&w, &slots[slot], out.y, out.bias};
  }
  run_quantized();
  run_floats();
}

void linear(const WeightView& w, const float* __restrict__ x, size_t m, float* __restrict__ y,
            const float* __restrict__ bias, MatmulIsa isa) {
  if (!is_float_type(w.type)) {
    if (!matmul_isa_supported(isa)) {
      throw std::invalid_argument(std::string("linear: this CPU cannot run the ") + to_string(isa) +
                                  " kernels");
    }
    detail::quantized_linear(isa, w, x, m, y, bias);
    return;
  }
  if (m == 0 || w.rows == 0) {
    return;
  }
  const detail::FloatProblem p = float_problem(w, x, y, bias);
  float_linear(isa, w.type, &p, 1, m);
}

} // namespace caflm
