// dot_super_rows_avx512(): 1 to 3 rows of x against a lane group of Q4_K,
// Q5_K or Q6_K weight rows read in place, with 512-bit maddubs and vpdpwssd.
// Compiled with AVX-512 enabled (caflm/cpu/CMakeLists.txt) and called only
// where the CPU has it. Internal linkage for everything else, as in the other
// AVX-512 files.
//
// A single sequence's decode reads every weight once, so its kernel should
// keep pace with the memory. The AVX2 in-place kernels ran Q4_K at 18-26
// GB/s of weights with them in cache (2 threads, Zen 5), well below what
// the memory gives, and Q5_K went through a decoding pass. Here each
// column's super-block is 4 vectors of 64 unsigned quants, each meeting its
// 64 values of x in one maddubs and its sub-blocks' scales in one vpdpwssd;
// Q4_K's and Q5_K's packed scales are unpacked 4 columns at a time.
//
// The bits are those of the AVX2 kernels: per super-block and column the
// exact integer sums S (scales times quants times x) and M (mins, or Q6_K's
// 32 * scale, times x's block sums), then the float steps of
// add_super_lane_block, then + bias.

#include "caflm/cpu/avx512_intrinsics.hpp"

#include "caflm/cpu/quantized_matmul.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::detail {

namespace {

/// 64 bytes of constants, read as one vector.
struct alignas(64) VectorConstant {
  std::uint8_t bytes[64];

  __m512i load() const { return _mm512_load_si512(bytes); }
};

/// Words 0-15 all `low`, words 16-31 all `high`.
constexpr VectorConstant word_halves(std::uint16_t low, std::uint16_t high) {
  VectorConstant c{};
  for (int i = 0; i < 32; ++i) {
    const std::uint16_t word = i < 16 ? low : high;
    c.bytes[2 * i] = static_cast<std::uint8_t>(word & 0xFF);
    c.bytes[2 * i + 1] = static_cast<std::uint8_t>(word >> 8);
  }
  return c;
}

/// vpshufb patterns spreading word `low` of each 128 bits over the low 256
/// bits and word `high` over the high 256 bits.
constexpr VectorConstant spread_words(int low, int high) {
  VectorConstant c{};
  for (int i = 0; i < 64; ++i)
    c.bytes[i] = static_cast<std::uint8_t>(2 * (i < 32 ? low : high) + i % 2);
  return c;
}

/// vpermw indices for Q6_K's chunk t: word w takes word 4t + w / 8.
constexpr VectorConstant quarter_words(int t) {
  VectorConstant c{};
  for (int i = 0; i < 32; ++i)
    c.bytes[2 * i] = static_cast<std::uint8_t>(4 * t + i / 8);
  return c;
}

constexpr VectorConstant kShifts42 = word_halves(4, 2);
constexpr VectorConstant kShifts31 = word_halves(3, 1);
constexpr VectorConstant kShifts02 = word_halves(0, 2);
// Q4_K's and Q5_K's chunk t: the scales of sub-blocks 4 (t / 2) + t % 2
// (low 256 bits) and two more (high).
constexpr VectorConstant kNibbleChunkScales[4] = {spread_words(0, 2), spread_words(1, 3),
                                                  spread_words(4, 6), spread_words(5, 7)};
constexpr VectorConstant kQ6_KChunkScales[4] = {quarter_words(0), quarter_words(1),
                                                quarter_words(2), quarter_words(3)};

/// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins. Chunk t of
/// a super-block is the low (t even) or high (t odd) nibbles of qs[64 (t / 2)
/// ..][0..63]: values of sub-blocks 4 (t / 2) + t % 2 and two more, 32 each.
template <typename BlockType>
struct NibbleBlocks {
  using Block = BlockType;
  static constexpr bool kWithMin = true;
  static constexpr std::size_t kScaleWordOffset = offsetof(Block, d); // d, then dmin

  /// x's 256 values of a super-block in the chunks' order: chunk 0 holds
  /// values 0-31 and 64-95, chunk 1 32-63 and 96-127, and so on.
  static void x_chunks(const std::int8_t* x, __m512i (&out)[4]) {
    const __m512i x0 = _mm512_loadu_si512(x);
    const __m512i x1 = _mm512_loadu_si512(x + 64);
    const __m512i x2 = _mm512_loadu_si512(x + 128);
    const __m512i x3 = _mm512_loadu_si512(x + 192);
    out[0] = _mm512_shuffle_i64x2(x0, x1, 0x44); // low 256 bits of each
    out[1] = _mm512_shuffle_i64x2(x0, x1, 0xEE); // high 256 bits of each
    out[2] = _mm512_shuffle_i64x2(x2, x3, 0x44);
    out[3] = _mm512_shuffle_i64x2(x2, x3, 0xEE);
  }

  /// The scales (bytes 0-7) and mins (8-15) of 4 blocks, one per 128
  /// bits: unpack_scales_k4's bytes, 4 blocks at once.
  static __m512i scales_mins(const std::uint8_t* const (&blocks)[4]) {
    // Each 128 bits: the 12 packed bytes as dwords u0, u1, u2 (and 4 more
    // bytes of the block, unused).
    __m512i packed = _mm512_castsi128_si512(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[0] + offsetof(Block, scales))));
    unrolled<3>([&](int l) {
      packed = _mm512_inserti32x4(packed,
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                      blocks[l + 1] + offsetof(Block, scales))),
                                  l + 1);
    });
    // Out dwords: [u0 & low6, (u2 & low4) | (u0 >> 6 & 3) << 4, u1 & low6,
    //              (u2 >> 4 & low4) | (u1 >> 6 & 3) << 4], bytewise.
    const __m512i sources = _mm512_shuffle_epi32(packed, _MM_PERM_CBCA);   // [u0, u2, u1, u2]
    const __m512i high_bits = _mm512_shuffle_epi32(packed, _MM_PERM_BBAA); // [u0, u0, u1, u1]
    const __m512i low6 = _mm512_and_si512(sources, _mm512_set1_epi8(0x3F));
    const __m512i combined = _mm512_or_si512(
        _mm512_and_si512(_mm512_srlv_epi32(sources, _mm512_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0,
                                                                      0, 4, 0, 0, 0, 4)),
                         _mm512_set1_epi8(0x0F)),
        _mm512_and_si512(_mm512_srli_epi32(high_bits, 2), _mm512_set1_epi8(0x30)));
    return _mm512_mask_blend_epi32(0xAAAA, low6, combined);
  }

  /// A block's 8 scales as int16 in each 128 bits, from the 128 bits `lane`
  /// of 4 blocks' (scales_mins()'s low bytes, widened).
  static __m512i column_scales(__m512i group_scales16, int lane) {
    switch (lane) {
    case 0:
      return _mm512_shuffle_i32x4(group_scales16, group_scales16, 0x00);
    case 1:
      return _mm512_shuffle_i32x4(group_scales16, group_scales16, 0x55);
    case 2:
      return _mm512_shuffle_i32x4(group_scales16, group_scales16, 0xAA);
    default:
      return _mm512_shuffle_i32x4(group_scales16, group_scales16, 0xFF);
    }
  }

  /// The int16 scale of every maddubs word of chunk t, from column_scales().
  static __m512i chunk_scales(__m512i scales16, int t) {
    return _mm512_shuffle_epi8(scales16, kNibbleChunkScales[t].load());
  }

  static void quants(const std::uint8_t* block, __m512i (&q)[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const std::uint8_t* qs = block + offsetof(Block, qs);
    for (int h = 0; h < 2; ++h) {
      const __m512i packed = _mm512_loadu_si512(qs + 64 * h);
      q[2 * h] = _mm512_and_si512(packed, low4);
      q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
    }
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      // Value 64c + l (l < 32) takes bit 2c of qh[l] as its fifth, value
      // 64c + 32 + l bit 2c + 1. Chunk 2h's low 256 bits are c = 2h, its
      // high ones c = 2h + 1: shifting qh's words left by 4 (low half) and 2
      // (high half) brings bits 0 and 2 to bit 4 in each byte.
      const __m512i fifth = _mm512_set1_epi8(0x10);
      const __m512i qh = _mm512_broadcast_i64x4(load32(block + offsetof(Block, qh))); // both halves
      const __m512i even_shifts = kShifts42.load();
      const __m512i odd_shifts = kShifts31.load();
      const __m512i qh_high = _mm512_srli_epi16(qh, 4); // bits 4-7 to 0-3 of each byte
      q[0] = _mm512_or_si512(q[0], _mm512_and_si512(_mm512_sllv_epi16(qh, even_shifts), fifth));
      q[1] = _mm512_or_si512(q[1], _mm512_and_si512(_mm512_sllv_epi16(qh, odd_shifts), fifth));
      q[2] =
          _mm512_or_si512(q[2], _mm512_and_si512(_mm512_sllv_epi16(qh_high, even_shifts), fifth));
      q[3] = _mm512_or_si512(q[3], _mm512_and_si512(_mm512_sllv_epi16(qh_high, odd_shifts), fifth));
    }
  }
};

/// Q6_K: 16 sub-blocks of 16 with int8 scales, quants stored + 32 (as the
/// decoder leaves them, unsigned), whose offset comes back as 32 * scale
/// times x's block sums. Chunk t is values 64t .. 64t + 63, in order.
struct Q6_KBlocks {
  using Block = BlockQ6_K;
  static constexpr bool kWithMin = false;
  // The 4 bytes ending with the block: the last two scales, then d.
  static constexpr std::size_t kScaleWordOffset = offsetof(Block, d) - 2;
  static_assert(offsetof(Block, d) + 2 == sizeof(Block));

  static void x_chunks(const std::int8_t* x, __m512i (&out)[4]) {
    unrolled<4>([&](int t) { out[t] = _mm512_loadu_si512(x + 64 * t); });
  }

  static __m128i scales(const std::uint8_t* block) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(Block, scales)));
  }

  /// Word w of chunk t covers values 64t + 2w and the next: sub-block
  /// 4t + w / 8.
  static __m512i chunk_scales(__m512i scales16, int t) {
    return _mm512_permutexvar_epi16(kQ6_KChunkScales[t].load(), scales16);
  }

  static void quants(const std::uint8_t* block, __m512i (&q)[4]) {
    // Half h (128 values): ql[64h + l] holds the low 4 bits of values l
    // (low nibble) and l + 64 (high), ql[64h + 32 + l] those of l + 32 and
    // l + 96; qh[32h + l] the high 2 bits of l, l + 32, l + 64 and l + 96.
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    const __m512i low_shifts = kShifts42.load();  // l: bits 0-1, l + 32: 2-3
    const __m512i high_shifts = kShifts02.load(); // l + 64: bits 4-5, l + 96: 6-7
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(block + offsetof(Block, ql) + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load32(block + offsetof(Block, qh) + 32 * h));
      q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                 _mm512_and_si512(_mm512_sllv_epi16(qh, low_shifts), bits45));
      q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                     _mm512_and_si512(_mm512_srlv_epi16(qh, high_shifts), bits45));
    }
  }
};

/// The totals of 8 columns' 16 lanes, in lane j for column j, from
/// lane_sums() of columns 0-3 (`first`) and of 4-7 (`last`).
inline __m256i column_totals(__m512i first, __m512i last) {
  // [first0 + first2, first1 + first3, last0 + last2, last1 + last3]
  const __m512i halves = _mm512_add_epi32(_mm512_shuffle_i64x2(first, last, 0x44),
                                          _mm512_shuffle_i64x2(first, last, 0xEE));
  const __m512i folded = _mm512_add_epi32(halves, _mm512_shuffle_i64x2(halves, halves, 0xB1));
  // Lanes 0 and 2 of 128 bits now hold columns 0-3 and 4-7.
  return _mm512_castsi512_si256(_mm512_shuffle_i64x2(folded, folded, 0x08));
}

/// MR rows from row0 against the group's kLaneGroupCols columns.
template <int MR, typename Blocks>
__attribute__((flatten, noinline)) void rows_block(const SuperLaneGroupProblem& p,
                                                   std::size_t row0) {
  using Block = typename Blocks::Block;
  const std::size_t k = p.k;
  const std::size_t nb = k / 256;
  const std::size_t subs = k / 16;
  // Columns past a ragged group's last read column 0's rows; their lanes
  // are never stored.
  const std::uint8_t* column[kLaneGroupCols];
  for (std::size_t j = 0; j < kLaneGroupCols; ++j)
    column[j] = p.rows + (j < p.cols ? j : 0) * p.row_bytes;
  __m256i scale_word_offsets = _mm256_setzero_si256();
  for (std::size_t j = 0; j < kLaneGroupCols; ++j)
    scale_word_offsets = _mm256_mask_set1_epi32(
        scale_word_offsets, static_cast<__mmask8>(1u << j),
        static_cast<std::int32_t>(column[j] - column[0] + Blocks::kScaleWordOffset));
  __m256 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm256_setzero_ps(); });
  for (std::size_t b = 0; b < nb; ++b) {
    if (row0 == 0) // the next group's weights, once
      prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m512i x[MR][4];
    __m256i bsums[MR]; // [16] int16: x's sums of each 16 values
    unrolled<MR>([&](int i) {
      Blocks::x_chunks(p.x_q + (row0 + i) * k + 256 * b, x[i]);
      bsums[i] = load32(p.x_bsums + (row0 + i) * subs + 16 * b);
    });
    // Q4_K, Q5_K: the columns' scales and mins as int16, 4 columns a vector,
    // one per 128 bits.
    __m512i group_scales16[2];
    __m512i mins16[2];
    if constexpr (Blocks::kWithMin) {
      unrolled<2>([&](int h) {
        const std::uint8_t* const blocks[4] = {
            block_at<Block>(column[4 * h], b), block_at<Block>(column[4 * h + 1], b),
            block_at<Block>(column[4 * h + 2], b), block_at<Block>(column[4 * h + 3], b)};
        const __m512i both = Blocks::scales_mins(blocks);
        group_scales16[h] = _mm512_unpacklo_epi8(both, _mm512_setzero_si512());
        mins16[h] = _mm512_unpackhi_epi8(both, _mm512_setzero_si512());
      });
    }
    // Per row, lane_sums() of columns 0-3 and of 4-7: each half reduced as
    // soon as it is done keeps fewer vectors live.
    __m512i half_sums[MR][2];
    unrolled<2>([&](int h) {
      __m512i lanes[MR][4];
      unrolled<4>([&](int c) {
        const std::uint8_t* block = block_at<Block>(column[4 * h + c], b);
        __m512i q[4];
        Blocks::quants(block, q);
        __m512i scales16;
        if constexpr (Blocks::kWithMin)
          scales16 = Blocks::column_scales(group_scales16[h], c);
        else // the 16 scales as int16
          scales16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(Blocks::scales(block)));
        unrolled<MR>([&](int i) { lanes[i][c] = _mm512_setzero_si512(); });
        unrolled<4>([&](int t) {
          const __m512i scales = Blocks::chunk_scales(scales16, t);
          unrolled<MR>([&](int i) {
            lanes[i][c] =
                _mm512_dpwssd_epi32(lanes[i][c], _mm512_maddubs_epi16(q[t], x[i][t]), scales);
          });
        });
        if constexpr (!Blocks::kWithMin) {
          // Less the offset's share: 32 * scale times x's block sums.
          const __m256i offsets = _mm256_slli_epi16(_mm512_castsi512_si256(scales16), 5);
          unrolled<MR>([&](int i) {
            lanes[i][c] = _mm512_sub_epi32(
                lanes[i][c], _mm512_zextsi256_si512(_mm256_madd_epi16(offsets, bsums[i])));
          });
        }
      });
      unrolled<MR>([&](int i) {
        half_sums[i][h] = lane_sums(lanes[i][0], lanes[i][1], lanes[i][2], lanes[i][3]);
      });
    });
    // The 8 columns' f16 d (low word) and dmin (Q4_K, Q5_K) or d (Q6_K,
    // high word) in one gather.
    const __m256i words = _mm256_i32gather_epi32(
        reinterpret_cast<const int*>(block_at<Block>(column[0], b)), scale_word_offsets, 1);
    const __m256 w_d_low = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(words));
    const __m256 w_d_high = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(words, 16)));
    unrolled<MR>([&](int i) {
      const __m256i sums = column_totals(half_sums[i][0], half_sums[i][1]);
      const __m256 x_d = _mm256_set1_ps(p.x_d[(row0 + i) * nb + b]);
      if constexpr (Blocks::kWithMin) {
        // Each min twice (16 values each) meets x's sums of 32: the pairs'.
        const __m128i pair_sums =
            _mm256_cvtepi32_epi16(_mm256_madd_epi16(bsums[i], _mm256_set1_epi16(1)));
        const __m512i pairs = _mm512_broadcast_i32x4(pair_sums);
        const __m512i a = _mm512_madd_epi16(mins16[0], pairs); // columns 0-3, one per 128 bits
        const __m512i c = _mm512_madd_epi16(mins16[1], pairs); // columns 4-7
        // Per 128 bits: [a0 + a2, c0 + c2, a1 + a3, c1 + c3], then dwords 0
        // and 1 the totals of a column of each half.
        __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(a, c), _mm512_unpackhi_epi32(a, c));
        t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
        const __m256i min_sums = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), t));
        acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), x_d), w_d_low, acc[i]);
        acc[i] =
            _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(min_sums), x_d), w_d_high, acc[i]);
      } else {
        acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), x_d), w_d_high, acc[i]);
      }
    });
  }
  store_group_rows(p, row0, acc);
}

template <typename Blocks>
void rows_of(const SuperLaneGroupProblem& p) {
  if (p.m >= kSuperRowsMaxRows)
    throw std::invalid_argument("dot_super_rows_avx512: takes fewer than kSuperRowsMaxRows rows");
  // Blocks of 3 rows, then the rest: the group's weights come from L1 or
  // L2 after the first.
  std::size_t row = 0;
  for (; row + 3 <= p.m; row += 3)
    rows_block<3, Blocks>(p, row);
  if (p.m - row == 2)
    rows_block<2, Blocks>(p, row);
  else if (p.m - row == 1)
    rows_block<1, Blocks>(p, row);
}

} // namespace

void dot_super_rows_avx512(const SuperLaneGroupProblem& p) {
  switch (p.type) {
  case TensorType::Q4_K:
    return rows_of<NibbleBlocks<BlockQ4_K>>(p);
  case TensorType::Q5_K:
    return rows_of<NibbleBlocks<BlockQ5_K>>(p);
  case TensorType::Q6_K:
    return rows_of<Q6_KBlocks>(p);
  default:
    break;
  }
  throw std::invalid_argument(std::string("dot_super_rows_avx512: ") + to_string(p.type) +
                              " blocks are not Q4_K, Q5_K or Q6_K");
}

} // namespace caflm::detail
