#pragma once

// Launcher of the batch-invariant linear layer (see gemm_kernels.hpp for the
// design and why it is not cuBLAS).

#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "caflm/cuda/gemm_kernels.hpp"
#include "caflm/gguf/tensor_type.hpp"
#include "caflm/model/weight_view.hpp"

// Unrolling hints for the device pass only (the host compiler, which also
// compiles the __host__ __device__ functions below, rejects the pragma).
#ifdef __CUDA_ARCH__
#define CAFLM_GEMM_UNROLL _Pragma("unroll")
#else
#define CAFLM_GEMM_UNROLL
#endif

namespace caflm::cuda {

/// y[r, n] = sum_k x[r, k] * W[n, k] (+ bias[n]) for r < m, n < weight.rows,
/// k < weight.cols, on `stream`. `weight.data` is device memory holding the
/// matrix in its GGUF bytes (rows of tensor_row_bytes(type, K) bytes, the
/// start aligned to 16 bytes); x, bias and y are device memory. Each output
/// element is reduced over K in one fixed order that depends only on K and
/// the type, so y[r] is bitwise the same whatever m is, wherever row r sits
/// and whatever the other rows hold. m == 0 launches nothing. Throws
/// std::invalid_argument for a shape plan_gemm_launch refuses, an x or
/// weight not aligned to 16 bytes or a stride of x not a multiple of 4, and
/// std::runtime_error when the launch fails. With `programmatic` (a device
/// of compute capability 9.0 or later only) the kernel is launched
/// programmatically (programmatic_launch.cuh): it fetches its weights into L2
/// while the kernel before it on the stream still runs, which then must not
/// write the weights, and touches x, y and the bias only after that kernel
/// has ended.
void launch_linear(const WeightView& weight, // [N, K] device, GGUF bytes
                   const float* x,           // [m, x_stride] device
                   std::uint64_t x_stride,   // floats between rows of x (>= K)
                   std::uint64_t m,
                   const float* bias,      // [N] device, or null
                   float* y,               // [m, y_stride] device
                   std::uint64_t y_stride, // floats between rows of y (>= N)
                   cudaStream_t stream, bool programmatic = false);

namespace detail {

// The per-lane arithmetic of the linear kernel, host and device, so the tests
// can emulate a warp on a machine without a GPU and compare bitwise.

// ---- arithmetic: IEEE single operations that are never contracted ----
// On the device the _rn intrinsics, which the compiler never fuses into an
// FMA; on the host (the tests' emulation of a warp) a volatile store forces
// the rounding of each operation.

__host__ __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}

__host__ __device__ __forceinline__ float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}

__host__ __device__ __forceinline__ float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}

__host__ __device__ __forceinline__ float bits_to_float(std::uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// ---- loads ----

__host__ __device__ __forceinline__ std::uint32_t load_u16(const std::uint8_t* p) {
  return *reinterpret_cast<const std::uint16_t*>(p);
}

__host__ __device__ __forceinline__ float half_bits_to_float(std::uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
#else
  return f16_to_f32(static_cast<std::uint16_t>(bits));
#endif
}

__host__ __device__ __forceinline__ float load_half(const std::uint8_t* p) {
  return half_bits_to_float(load_u16(p));
}

/// 8 bytes from a 2-byte aligned address (block fields are only that
/// aligned), as two little-endian words.
__host__ __device__ __forceinline__ uint2 load_8_bytes(const std::uint8_t* p) {
  const std::uint16_t* q = reinterpret_cast<const std::uint16_t*>(p);
  return make_uint2(static_cast<std::uint32_t>(q[0]) | (static_cast<std::uint32_t>(q[1]) << 16),
                    static_cast<std::uint32_t>(q[2]) | (static_cast<std::uint32_t>(q[3]) << 16));
}

__host__ __device__ __forceinline__ std::uint32_t byte_of(uint2 bytes, int i) {
  return ((i < 4 ? bytes.x : bytes.y) >> (8 * (i & 3))) & 0xFF;
}

// ---- decoders: w[i] = element k + i of a row, k a multiple of 8 ----

template <TensorType kType>
__host__ __device__ __forceinline__ void
decode8(const std::uint8_t* __restrict__ row, // [row_bytes]
        std::uint32_t k, float (&w)[8]) {
  if constexpr (kType == TensorType::F32) {
    const float4* p = reinterpret_cast<const float4*>(row) + k / 4;
    const float4 a = p[0];
    const float4 b = p[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else if constexpr (kType == TensorType::F16 || kType == TensorType::BF16) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * std::uint64_t{k});
    const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t bits = (words[i / 2] >> (16 * (i % 2))) & 0xFFFF;
      if constexpr (kType == TensorType::F16)
        w[i] = half_bits_to_float(bits);
      else
        w[i] = bits_to_float(bits << 16);
    }
  } else if constexpr (kType == TensorType::Q4_0 || kType == TensorType::Q4_1) {
    // Value j < 16 is the low nibble of qs[j], value j >= 16 the high one of qs[j - 16].
    constexpr std::uint32_t kBytes = kType == TensorType::Q4_0 ? 18 : 20;
    constexpr std::uint32_t kQsOffset = kType == TensorType::Q4_0 ? 2 : 4;
    const std::uint8_t* block = row + (k / 32) * kBytes;
    const std::uint32_t j0 = k % 32;
    const float d = load_half(block);
    const uint2 qs = load_8_bytes(block + kQsOffset + (j0 & 15));
    const int shift = j0 >= 16 ? 4 : 0;
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int q = static_cast<int>((byte_of(qs, i) >> shift) & 0xF);
      if constexpr (kType == TensorType::Q4_0)
        w[i] = mul_rn(static_cast<float>(q - 8), d);
      else
        w[i] = add_rn(mul_rn(static_cast<float>(q), d), load_half(block + 2));
    }
  } else if constexpr (kType == TensorType::Q5_0 || kType == TensorType::Q5_1) {
    constexpr bool kHasMin = kType == TensorType::Q5_1;
    constexpr std::uint32_t kBytes = kHasMin ? 24 : 22;
    constexpr std::uint32_t kQhOffset = kHasMin ? 4 : 2;
    const std::uint8_t* block = row + (k / 32) * kBytes;
    const std::uint32_t j0 = k % 32;
    const float d = load_half(block);
    // Bit j of qh is the fifth bit of value j.
    const std::uint32_t qh = load_u16(block + kQhOffset) | (load_u16(block + kQhOffset + 2) << 16);
    const uint2 qs = load_8_bytes(block + kQhOffset + 4 + (j0 & 15));
    const int shift = j0 >= 16 ? 4 : 0;
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int q =
          static_cast<int>(((byte_of(qs, i) >> shift) & 0xF) | (((qh >> (j0 + i)) & 1) << 4));
      if constexpr (kHasMin)
        w[i] = add_rn(mul_rn(static_cast<float>(q), d), load_half(block + 2));
      else
        w[i] = mul_rn(static_cast<float>(q - 16), d);
    }
  } else if constexpr (kType == TensorType::Q8_0) {
    const std::uint8_t* block = row + (k / 32) * 34;
    const float d = load_half(block);
    const uint2 qs = load_8_bytes(block + 2 + k % 32);
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i)
      w[i] = mul_rn(static_cast<float>(static_cast<std::int8_t>(byte_of(qs, i))), d);
  } else if constexpr (kType == TensorType::Q2_K || kType == TensorType::Q3_K) {
    // Per 128 values: 4 shifts of 2 bits x 2 halves of 16 values, one scale
    // each; byte l of the 32 holds values l, l + 32, l + 64, l + 96.
    constexpr bool kQ2 = kType == TensorType::Q2_K;
    const std::uint8_t* block = row + (k / 256) * (kQ2 ? 84 : 110);
    const std::uint32_t e = k % 256;
    const std::uint32_t n = e / 128;
    const std::uint32_t shift_index = (e % 128) / 32;
    const std::uint32_t half = (e % 32) / 16;
    const std::uint32_t l0 = e % 16;
    const std::uint32_t is = n * 8 + shift_index * 2 + half;
    const int shift = static_cast<int>(2 * shift_index);
    if constexpr (kQ2) {
      const std::uint32_t sc = block[is];
      const float dl = mul_rn(load_half(block + 80), static_cast<float>(sc & 0xF));
      const float ml = mul_rn(load_half(block + 82), static_cast<float>(sc >> 4));
      const uint2 qs = load_8_bytes(block + 16 + n * 32 + half * 16 + l0);
      CAFLM_GEMM_UNROLL
      for (int i = 0; i < 8; ++i)
        w[i] = sub_rn(mul_rn(dl, static_cast<float>((byte_of(qs, i) >> shift) & 3)), ml);
    } else {
      const std::uint8_t* scales = block + 96;
      const int low = is < 8 ? scales[is] & 0xF : scales[is - 8] >> 4;
      const int high = (scales[8 + is % 4] >> (2 * (is / 4))) & 3;
      const float dl = mul_rn(load_half(block + 108), static_cast<float>((low | (high << 4)) - 32));
      const std::uint32_t mask_bit = n * 4 + shift_index;
      const uint2 qs = load_8_bytes(block + 32 + n * 32 + half * 16 + l0);
      const uint2 hmask = load_8_bytes(block + half * 16 + l0);
      CAFLM_GEMM_UNROLL
      for (int i = 0; i < 8; ++i) {
        // A clear hmask bit means the 2-bit value is offset by -4.
        const int value = static_cast<int>((byte_of(qs, i) >> shift) & 3) -
                          (((byte_of(hmask, i) >> mask_bit) & 1) ? 0 : 4);
        w[i] = mul_rn(dl, static_cast<float>(value));
      }
    }
  } else if constexpr (kType == TensorType::Q4_K || kType == TensorType::Q5_K) {
    // Per 64 values: the low nibbles of 32 bytes (sub-block 2c), then the
    // high ones (2c + 1); 6-bit scales and mins packed in 12 bytes.
    constexpr bool kQ5 = kType == TensorType::Q5_K;
    const std::uint8_t* block = row + (k / 256) * (kQ5 ? 176 : 144);
    const std::uint32_t e = k % 256;
    const std::uint32_t c = e / 64;
    const bool high_nibble = (e % 64) >= 32;
    const std::uint32_t l0 = e % 32;
    const std::uint32_t sub = 2 * c + (high_nibble ? 1 : 0);
    const std::uint8_t* packed = block + 4;
    std::uint32_t sc, mn;
    if (sub < 4) {
      sc = packed[sub] & 63;
      mn = packed[sub + 4] & 63;
    } else {
      sc = (packed[sub + 4] & 0xF) | ((packed[sub - 4] >> 6) << 4);
      mn = (packed[sub + 4] >> 4) | ((packed[sub] >> 6) << 4);
    }
    const float d1 = mul_rn(load_half(block), static_cast<float>(sc));
    const float m1 = mul_rn(load_half(block + 2), static_cast<float>(mn));
    const uint2 ql = load_8_bytes(block + (kQ5 ? 48 : 16) + 32 * c + l0);
    uint2 qh = make_uint2(0, 0);
    if constexpr (kQ5)
      qh = load_8_bytes(block + 16 + l0);
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i) {
      std::uint32_t q = high_nibble ? byte_of(ql, i) >> 4 : byte_of(ql, i) & 0xF;
      if constexpr (kQ5)
        q += ((byte_of(qh, i) >> sub) & 1) ? 16 : 0;
      w[i] = sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
    }
  } else if constexpr (kType == TensorType::Q6_K) {
    // Per 128 values, group g of 32 takes the low (g < 2) or high nibbles of
    // ql[32 (g % 2) ...] and bits 2g, 2g + 1 of qh; 16 values per scale.
    const std::uint8_t* block = row + (k / 256) * 210;
    const std::uint32_t e = k % 256;
    const std::uint32_t chunk = e / 128;
    const std::uint32_t g = (e % 128) / 32;
    const std::uint32_t l0 = e % 32;
    const float d = load_half(block + 208);
    const auto sc = static_cast<std::int8_t>(block[192 + 8 * chunk + 2 * g + l0 / 16]);
    const float dl = mul_rn(d, static_cast<float>(sc));
    const uint2 ql = load_8_bytes(block + 64 * chunk + 32 * (g % 2) + l0);
    const uint2 qh = load_8_bytes(block + 128 + 32 * chunk + l0);
    const int shift = g < 2 ? 0 : 4;
    CAFLM_GEMM_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int q = static_cast<int>(((byte_of(ql, i) >> shift) & 0xF) |
                                     (((byte_of(qh, i) >> (2 * g)) & 3) << 4)) -
                    32;
      w[i] = mul_rn(dl, static_cast<float>(q));
    }
  }
}

/// Warp steps whose weights a lane loads before it multiplies any of them:
/// at one or two rows a warp has little arithmetic to hide the latency of
/// its weight loads behind, so it keeps several steps' loads in flight.
template <int kRows>
inline constexpr int kGemmStepsInFlight = kRows <= 2 ? 4 : 1;

/// Lane `lane`'s share of y[r, n] for the kRows rows of x and the kColumns
/// weight rows n: acc[c][r] += products of elements k = k0 + 8 lane + i
/// (k0 = 0, 256, ...; i = 0..7) in that order, each with one fmaf. The
/// kernel adds the 32 lanes' sums with a butterfly; the tests run this on the
/// host to emulate a warp. How many columns a lane computes at once, and how
/// many steps' weights it decodes before their products are added, change
/// when loads are issued, never the order of any sum.
template <TensorType kType, int kRows, int kColumns>
__host__ __device__ __forceinline__ void
accumulate_lane(const std::uint8_t* const (&w_rows)[kColumns], // [row_bytes] each
                const float* const (&x_rows)[kRows],           // [K] each
                std::uint32_t k_len, std::uint32_t lane, float (&acc)[kColumns][kRows]) {
  constexpr int kSteps = kGemmStepsInFlight<kRows>;
  for (std::uint32_t k0 = 0; k0 < k_len; k0 += kSteps * kGemmValuesPerWarpStep) {
    float w[kColumns][kSteps][8];
    CAFLM_GEMM_UNROLL
    for (int c = 0; c < kColumns; ++c) {
      CAFLM_GEMM_UNROLL
      for (int step = 0; step < kSteps; ++step) {
        const std::uint32_t k = k0 + step * kGemmValuesPerWarpStep + lane * kGemmValuesPerLane;
        if (k < k_len)
          decode8<kType>(w_rows[c], k, w[c][step]);
      }
    }
    CAFLM_GEMM_UNROLL
    for (int step = 0; step < kSteps; ++step) {
      const std::uint32_t k = k0 + step * kGemmValuesPerWarpStep + lane * kGemmValuesPerLane;
      if (k >= k_len)
        break;
      CAFLM_GEMM_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(x_rows[r] + k);
        const float4 b = *reinterpret_cast<const float4*>(x_rows[r] + k + 4);
        CAFLM_GEMM_UNROLL
        for (int c = 0; c < kColumns; ++c) {
          float s = acc[c][r];
          s = fmaf(w[c][step][0], a.x, s);
          s = fmaf(w[c][step][1], a.y, s);
          s = fmaf(w[c][step][2], a.z, s);
          s = fmaf(w[c][step][3], a.w, s);
          s = fmaf(w[c][step][4], b.x, s);
          s = fmaf(w[c][step][5], b.y, s);
          s = fmaf(w[c][step][6], b.z, s);
          s = fmaf(w[c][step][7], b.w, s);
          acc[c][r] = s;
        }
      }
    }
  }
}

} // namespace detail

} // namespace caflm::cuda
