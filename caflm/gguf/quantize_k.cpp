// The ggml K-quant formats (256-value super-blocks): Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K and the activation format Q8_K. Encoded as ggml's quantize_row_*_ref
// (no importance matrix) and decoded as its dequantize_row_* (ggml-quants.c),
// with the same float operations in the same order, so bytes and floats are
// bit-identical to ggml's. The scale searches (make_qkx2_quants,
// make_q3_quants, make_qx_quants) follow ggml's constants and iteration
// counts exactly; see the comments at each for what they do.

#include "caflm/gguf/quantize_impl.hpp"

#include "caflm/gguf/tensor_type.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace caflm::quant_detail {

namespace {

/// ggml's GROUP_MAX_EPS: a group whose largest magnitude is below this is
/// treated as all zero.
constexpr float kGroupMaxEps = 1e-15f;

/// Sub-block scale (and min) j of Q4_K/Q5_K from the 12 packed bytes: j < 4
/// keep 6 bits in bytes j and j + 4; j >= 4 keep their low 4 bits in byte
/// j + 4 and their top 2 bits in the top bits of bytes j - 4 and j.
inline void scale_min_k4(int j, const std::uint8_t* __restrict__ packed, std::uint8_t& scale,
                         std::uint8_t& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

/// The inverse of scale_min_k4 for all 8 sub-blocks (6-bit values).
void pack_scale_min_k4(const std::uint8_t* scales, const std::uint8_t* mins,
                       std::uint8_t* __restrict__ packed) {
  for (int j = 0; j < 8; ++j) {
    const std::uint8_t ls = scales[j];
    const std::uint8_t lm = mins[j];
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] = static_cast<std::uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
      packed[j] = static_cast<std::uint8_t>(packed[j] | ((lm >> 4) << 6));
    }
  }
}

/// Signed 6-bit scale j (already minus 32) of Q3_K: the low 4 bits are the
/// low (j < 8) or high (j >= 8) nibble of byte j % 8, the top 2 bits sit at
/// bit 2 * (j / 4) of byte 8 + j % 4.
inline int q3_k_scale(const std::uint8_t* __restrict__ packed, int j) {
  const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

/// Packs 4 values of 2 bits per byte as the Q2_K and Q3_K decoders read
/// them: within each 128 values, byte l of the 32 holds values l, l + 32,
/// l + 64 and l + 96 at bit offsets 0, 2, 4 and 6.
void pack_2bit(const std::uint8_t* levels, std::uint8_t* __restrict__ qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] =
          static_cast<std::uint8_t>(levels[j + l] | (levels[j + l + 32] << 2) |
                                    (levels[j + l + 64] << 4) | (levels[j + l + 96] << 6));
    }
  }
}

/// ggml's make_qkx2_quants: fits x ~ scale * L - the_min with L in
/// [0, nmax] by weighted least squares, trying nstep + 1 candidate inverse
/// scales (rmin + rdelta * is + nmax) / (max - min) and keeping the one of
/// least weighted error (absolute when use_mad, squared otherwise).
float make_qkx2_quants(int n, int nmax, const float* __restrict__ x,
                       const float* __restrict__ weights, std::uint8_t* __restrict__ L,
                       float* the_min, std::uint8_t* __restrict__ Laux, float rmin, float rdelta,
                       int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min)
      min = x[i];
    if (x[i] > max)
      max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0)
    min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i];
      const auto lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i)
          L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/// ggml's make_q3_quants with do_rmse: symmetric levels in [-nmax, nmax - 1]
/// from the value of largest magnitude, then up to 5 passes moving single
/// levels where that improves the x^2-weighted fit. L gets level + nmax.
float make_q3_quants(int n, int nmax, const float* __restrict__ x, std::int8_t* __restrict__ L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    const auto lf = static_cast<float>(l);
    sumlx += w * x[i] * lf;
    suml2 += w * lf * lf;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const auto old_l = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * old_l;
      if (slx > 0) {
        float sl2 = suml2 - w * old_l * old_l;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          const auto new_lf = static_cast<float>(new_l);
          slx += w * x[i] * new_lf;
          sl2 += w * new_lf * new_lf;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0)
      break;
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// ggml's make_qx_quants with rmse_type 1 and no importance weights (the
/// only use in the reference quantizers, Q6_K's): symmetric levels in
/// [-nmax, nmax - 1], weights x^2, the least-squares scale of the best of
/// 19 candidate inverse scales -(nmax + 0.1 * is) / max. L gets level + nmax.
float make_qx_quants(int n, int nmax, const float* __restrict__ x, std::int8_t* __restrict__ L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const auto lf = static_cast<float>(l);
    sumlx += w * x[i] * lf;
    suml2 += w * lf * lf;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0)
      continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const auto lf = static_cast<float>(l);
      sumlx += w * x[i] * lf;
      suml2 += w * lf * lf;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// Shared by Q4_K and Q5_K: per sub-block of 32, weights av_x + |x| and
/// make_qkx2_quants; then 6-bit scales and mins relative to the largest,
/// and the levels recomputed against the rounded scales. Fills `levels`
/// (0..nmax), the packed scales and d/dmin.
void quantize_k_scales_and_mins(const float* __restrict__ x, int nmax, float rmin, float rdelta,
                                int nstep, std::uint8_t* __restrict__ levels,
                                std::uint8_t* __restrict__ packed, std::uint16_t& d_half,
                                std::uint16_t& dmin_half) {
  constexpr int kSub = 32;
  constexpr int kSubBlocks = kQK_K / kSub;
  std::uint8_t Laux[kSub];
  float weights[kSub];
  float mins[kSubBlocks];
  float scales[kSubBlocks];
  float max_scale = 0; // as the min is subtracted, scales are never negative
  float max_min = 0;
  for (int j = 0; j < kSubBlocks; ++j) {
    const float* xs = x + kSub * j;
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l)
      sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l)
      weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(kSub, nmax, xs, weights, levels + kSub * j, &mins[j], Laux, rmin,
                                 rdelta, nstep, false);
    if (scales[j] > max_scale)
      max_scale = scales[j];
    if (mins[j] > max_min)
      max_min = mins[j];
  }

  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::uint8_t ls[kSubBlocks];
  std::uint8_t lm[kSubBlocks];
  for (int j = 0; j < kSubBlocks; ++j) {
    // ggml stores nearest_int's result in a uint8_t before clamping to 63.
    ls[j] =
        std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_min * mins[j])));
  }
  std::memset(packed, 0, kKScaleSize);
  pack_scale_min_k4(ls, lm, packed);
  d_half = f32_to_f16(max_scale / 63.f);
  dmin_half = f32_to_f16(max_min / 63.f);

  for (int j = 0; j < kSubBlocks; ++j) {
    std::uint8_t sc, m;
    scale_min_k4(j, packed, sc, m);
    const float d = half_to_float(d_half) * static_cast<float>(sc);
    if (d == 0.0f)
      continue; // keep make_qkx2_quants's levels
    const float dm = half_to_float(dmin_half) * static_cast<float>(m);
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int((x[kSub * j + ii] + dm) / d);
      levels[kSub * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

} // namespace

// ---- decoders ----

void dequantize_q2_k(const BlockQ2_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = half_to_float(b.d);
    const float min = half_to_float(b.dmin);
    const std::uint8_t* q = b.qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const std::uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = min * static_cast<float>(sc >> 4);
          const std::uint8_t* qh = q + 16 * half;
          for (int l = 0; l < 16; ++l)
            *out++ = dl * static_cast<float>((qh[l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d_all = half_to_float(b.d);
    int scales[16];
    for (int j = 0; j < 16; ++j)
      scales[j] = q3_k_scale(b.scales, j);
    const std::uint8_t* q = b.qs;
    int is = 0;
    int mask_bit = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++mask_bit) {
        const std::uint8_t mask = static_cast<std::uint8_t>(1u << mask_bit);
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(scales[is++]);
          const std::uint8_t* qs = q + 16 * half;
          const std::uint8_t* hm = b.hmask + 16 * half;
          for (int l = 0; l < 16; ++l) {
            // A clear hmask bit means the 2-bit value is offset by -4.
            const int value = ((qs[l] >> shift) & 3) - ((hm[l] & mask) ? 0 : 4);
            *out++ = dl * static_cast<float>(value);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const BlockQ4_K& b = blocks[i];
    const float d = half_to_float(b.d);
    const float min = half_to_float(b.dmin);
    const std::uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      std::uint8_t sc, m;
      scale_min_k4(is, b.scales, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, sc, m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        out[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l)
        out[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
      out += 64;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const BlockQ5_K& b = blocks[i];
    const float d = half_to_float(b.d);
    const float min = half_to_float(b.dmin);
    const std::uint8_t* ql = b.qs;
    const std::uint8_t* qh = b.qh;
    int u1 = 1, u2 = 2; // qh bits of the low and high nibbles of this 64
    for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      std::uint8_t sc, m;
      scale_min_k4(is, b.scales, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, sc, m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        out[l] = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        out[32 + l] = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      out += 64;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const BlockQ6_K& b = blocks[i];
    const float d = half_to_float(b.d);
    // Per 128 values, group g of 32 takes the low (g < 2) or high nibbles of
    // ql[32 * (g % 2) ...] and bits 2g, 2g + 1 of qh; 16 values per scale.
    for (int chunk = 0; chunk < 2; ++chunk) {
      const std::uint8_t* ql = b.ql + 64 * chunk;
      const std::uint8_t* qh = b.qh + 32 * chunk;
      const std::int8_t* sc = b.scales + 8 * chunk;
      for (int g = 0; g < 4; ++g) {
        const std::uint8_t* qlg = ql + 32 * (g % 2);
        const int nibble_shift = g < 2 ? 0 : 4;
        for (int half = 0; half < 2; ++half) {
          // ggml computes d * sc * q left to right: (d * sc) first.
          const float dl = d * static_cast<float>(sc[2 * g + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = (((qlg[l] >> nibble_shift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
            out[32 * g + l] = dl * static_cast<float>(q);
          }
        }
      }
      out += 128;
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK_K) {
    const BlockQ8_K& b = blocks[i];
    for (int j = 0; j < kQK_K; ++j)
      out[j] = b.d * static_cast<float>(b.qs[j]);
  }
}

// ---- encoders ----

void quantize_q2_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ2_K* out) {
  constexpr int kSub = 16;
  constexpr int kSubBlocks = kQK_K / kSub;
  constexpr float q4scale = 15.f;
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ2_K& y = out[i];
    std::uint8_t L[kQK_K];
    std::uint8_t Laux[kSub];
    float weights[kSub];
    float mins[kSubBlocks];
    float scales[kSubBlocks];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < kSub; ++l)
        weights[l] = std::fabs(x[kSub * j + l]);
      scales[j] = make_qkx2_quants(kSub, 3, x + kSub * j, weights, L + kSub * j, &mins[j], Laux,
                                   -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale)
        max_scale = scales[j];
      if (mins[j] > max_min)
        max_min = mins[j];
    }

    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kSubBlocks; ++j)
        y.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
      y.d = f32_to_f16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kSubBlocks; ++j)
        y.scales[j] = 0;
      y.d = f32_to_f16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kSubBlocks; ++j) {
        const int l = nearest_int(iscale * mins[j]);
        y.scales[j] = static_cast<std::uint8_t>(y.scales[j] | static_cast<std::uint8_t>(l << 4));
      }
      y.dmin = f32_to_f16(max_min / q4scale);
    } else {
      y.dmin = f32_to_f16(0.f);
    }

    for (int j = 0; j < kSubBlocks; ++j) {
      const float d = half_to_float(y.d) * static_cast<float>(y.scales[j] & 0xF);
      if (d == 0.0f)
        continue;
      const float dm = half_to_float(y.dmin) * static_cast<float>(y.scales[j] >> 4);
      for (int ii = 0; ii < kSub; ++ii) {
        const int l = nearest_int((x[kSub * j + ii] + dm) / d);
        L[kSub * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y.qs);
  }
}

void quantize_q3_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ3_K* out) {
  constexpr int kSub = 16;
  constexpr int kSubBlocks = kQK_K / kSub;
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ3_K& y = out[i];
    std::int8_t L[kQK_K];
    float scales[kSubBlocks];
    float max_scale = 0;
    float amax = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      scales[j] = make_q3_quants(kSub, 4, x + kSub * j, L + kSub * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }

    std::memset(y.scales, 0, kKScaleSize);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kSubBlocks; ++j) {
        // ggml keeps nearest_int's result in an int8_t before clamping.
        int l = static_cast<std::int8_t>(nearest_int(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8)
          y.scales[j] = static_cast<std::uint8_t>(l & 0xF);
        else
          y.scales[j - 8] = static_cast<std::uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
        l >>= 4;
        y.scales[j % 4 + 8] = static_cast<std::uint8_t>(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y.d = f32_to_f16(1 / iscale);
    } else {
      y.d = f32_to_f16(0.f);
    }

    for (int j = 0; j < kSubBlocks; ++j) {
      const float d = half_to_float(y.d) * static_cast<float>(q3_k_scale(y.scales, j));
      if (d == 0.0f)
        continue;
      for (int ii = 0; ii < kSub; ++ii) {
        const int l = nearest_int(x[kSub * j + ii] / d);
        L[kSub * j + ii] = static_cast<std::int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }

    // Levels 4..7 set the value's hmask bit and keep level - 4 in qs. The
    // first 32 values use bit 0 of hmask[0..31], the next 32 bit 1, and so on.
    std::memset(y.hmask, 0, kQK_K / 8);
    std::uint8_t low_bits[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      int level = L[j];
      if (level > 3) {
        y.hmask[j % 32] = static_cast<std::uint8_t>(y.hmask[j % 32] | (1u << (j / 32)));
        level -= 4;
      }
      low_bits[j] = static_cast<std::uint8_t>(level);
    }
    pack_2bit(low_bits, y.qs);
  }
}

void quantize_q4_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ4_K* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ4_K& y = out[i];
    std::uint8_t L[kQK_K];
    quantize_k_scales_and_mins(x, 15, -1.f, 0.1f, 20, L, y.scales, y.d, y.dmin);
    // Each 32 bytes hold 64 values: the low nibbles the first 32, the high
    // nibbles the next 32.
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l)
        y.qs[j / 2 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q5_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ5_K* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ5_K& y = out[i];
    std::uint8_t L[kQK_K];
    quantize_k_scales_and_mins(x, 31, -0.5f, 0.1f, 15, L, y.scales, y.d, y.dmin);
    // As Q4_K for the low 4 bits; the fifth bit of value l + 64 * k is bit
    // 2k of qh[l] (first 32 of the 64) or bit 2k + 1 (second 32).
    std::memset(y.qh, 0, kQK_K / 8);
    for (int n = 0, k = 0; n < kQK_K; n += 64, ++k) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          y.qh[j] = static_cast<std::uint8_t>(y.qh[j] | (1u << (2 * k)));
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          y.qh[j] = static_cast<std::uint8_t>(y.qh[j] | (2u << (2 * k)));
        }
        y.qs[n / 2 + j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void quantize_q6_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ6_K* out) {
  constexpr int kSub = 16;
  constexpr int kSubBlocks = kQK_K / kSub;
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ6_K& y = out[i];
    std::int8_t L[kQK_K];
    float scales[kSubBlocks];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kSubBlocks; ++ib) {
      scales[ib] = make_qx_quants(kSub, 32, x + kSub * ib, L + kSub * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }

    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof y);
      y.d = f32_to_f16(0.f);
      continue;
    }

    const float iscale = -128.f / max_scale;
    y.d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < kSubBlocks; ++ib)
      y.scales[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));

    for (int j = 0; j < kSubBlocks; ++j) {
      const float d = half_to_float(y.d) * static_cast<float>(y.scales[j]);
      if (d == 0.0f)
        continue;
      for (int ii = 0; ii < kSub; ++ii) {
        const int l = nearest_int(x[kSub * j + ii] / d);
        L[kSub * j + ii] = static_cast<std::int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }

    // Per 128 values: ql[l] holds the low 4 bits of values l (low nibble) and
    // l + 64 (high nibble), ql[l + 32] those of l + 32 and l + 96; qh[l] the
    // top 2 bits of l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6.
    std::uint8_t* ql = y.ql;
    std::uint8_t* qh = y.qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int l0 = L[j + l], l1 = L[j + l + 32], l2 = L[j + l + 64], l3 = L[j + l + 96];
        ql[l] = static_cast<std::uint8_t>((l0 & 0xF) | ((l2 & 0xF) << 4));
        ql[l + 32] = static_cast<std::uint8_t>((l1 & 0xF) | ((l3 & 0xF) << 4));
        qh[l] = static_cast<std::uint8_t>((l0 >> 4) | ((l1 >> 4) << 2) | ((l2 >> 4) << 4) |
                                          ((l3 >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* __restrict__ x, std::size_t n_blocks, BlockQ8_K* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, x += kQK_K) {
    BlockQ8_K& y = out[i];
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      // ggml leaves bsums unwritten here; caflm zeroes them (the sums are 0).
      std::memset(&y, 0, sizeof y);
      continue;
    }
    // -127 rather than -128 keeps every quant in [-127, 127], as ggml does.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j)
      y.qs[j] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii)
        sum += y.qs[j * 16 + ii];
      y.bsums[j] = static_cast<std::int16_t>(sum);
    }
    y.d = 1 / iscale;
  }
}

} // namespace caflm::quant_detail
