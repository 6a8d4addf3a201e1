#pragma once

// The F32/F16/BF16 matmul kernels of linear(), written once over a SIMD
// width: cpu_matmul.cpp instantiates them for AVX2 (8 lanes) and
// float_matmul_avx512.cpp, the only file compiled with AVX-512, for 16 lanes.
// Everything below has internal linkage, so that each of those two files
// keeps its own machine code for its instruction set (an inline function
// shared between them could be linked from the AVX-512 file into the AVX2
// path). Internals of caflm/cpu and its tests; include nowhere else.
//
// Per output element the arithmetic is cpu_matmul.hpp's: one LANES-wide
// accumulator takes fma(x[r, k..k+LANES], w[n, k..k+LANES]) chunk by chunk
// along K (a partial last chunk zero-padded), then the SIMD type's fixed
// horizontal sum, then + bias[n]. Block shapes only change how many elements
// share a load.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/tensor_type.hpp"

namespace caflm::detail {

/// What every float block kernel needs: the operands, their shapes and the
/// output.
struct FloatProblem {
  const std::uint8_t* w; // [n, k] rows of w_row_bytes
  std::size_t w_row_bytes;
  const float* x; // [m, k]
  std::size_t k;
  std::size_t n;
  float* y;          // [m, n]
  const float* bias; // [n] or null
};

/// linear() for `count` F32, F16 or BF16 weights of one `type` against the
/// same m rows, with the 16-lane AVX-512 kernels (float_matmul_avx512.cpp);
/// the CPU must have AVX-512 F, BW and VL.
void float_linear_avx512(TensorType type, const FloatProblem* problems, std::size_t count,
                         std::size_t m);

} // namespace caflm::detail

namespace caflm {
namespace {

// Output columns per parallel work item: a multiple of every block width
// below, so only the last tile of a matrix has a ragged edge.
constexpr std::size_t kFloatTileCols = 48;

// One row's tiles, wider: its products read each weight once, from memory,
// and a thread's longer runs of consecutive weight rows stream faster
// (measured on Zen 5 over a TinyLlama-sized FFN, one row of F16 on 2
// threads: 96 columns 5-12% faster than 48, 192 no faster than 96).
constexpr std::size_t kOneRowTileCols = 2 * kFloatTileCols;

// Below this many multiply-adds a call runs on the calling thread.
constexpr std::size_t kFloatParallelMinMacs = std::size_t{1} << 18;

/// A run of cache lines one block asks the caches for, `lines_per_step` per
/// step along K: the slice of the next column block's weight rows that
/// falls to this block. In a decode step every matrix comes from memory
/// once, and the hardware prefetchers, following NR separate rows, start
/// each block's rows late; asked for while the block before computes, they
/// are at hand when needed. Blocks of several rows ask L2 (at K = 2048 the
/// block in use alone fills L1; measured on Zen 5 at 32 rows: F32 decode
/// 4-14% faster), a single row L1 (below). Empty by default.
struct PrefetchCursor {
  const std::uint8_t* line = nullptr;
  const std::uint8_t* end = nullptr;
  std::size_t lines_per_step = 1;
  bool to_l1 = false;

  /// Asks for this step's lines; where the block reads from is not needed.
  void step(std::size_t /*read_offset*/) {
    for (std::size_t i = 0; i < lines_per_step && line < end; ++i, line += 64) {
      if (to_l1)
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
      else
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
    }
  }
};

/// A cursor into L1 (`to_l1`) or L2 over the weight rows of the `cols`
/// columns from col0 of `p`, spread over `steps` steps along K.
inline PrefetchCursor weight_rows_cursor(const detail::FloatProblem& p, std::size_t col0,
                                         std::size_t cols, std::size_t steps, bool to_l1) {
  const std::uint8_t* begin = p.w + col0 * p.w_row_bytes;
  const std::size_t lines = (cols * p.w_row_bytes + 63) / 64;
  return {begin, begin + cols * p.w_row_bytes, (lines + steps - 1) / steps, to_l1};
}

/// Where the columns a thread computes next start: their product and first
/// column (no product after the thread's last tile).
struct ColumnStart {
  const detail::FloatProblem* p = nullptr;
  std::size_t col0 = 0;

  /// How many of the `most` columns from col0 the product has (p not null).
  std::size_t columns(std::size_t most) const { return std::min(most, p->n - col0); }
};

// How far ahead of its reads a one-row F32 block asks L1 for its weights: 8
// lines per row. (Measured on Zen 5, 2 threads, one row against 896-5632
// wide matrices that no cache holds: 36 GB/s asking nothing, 42 at 512
// bytes into L1, 41.5 at 1024, 36 at 2048 into L2; Qwen2.5-0.5B's F32
// one-sequence decode 17% faster, the 134M model's no slower. AVX2 on the
// same machine: 38 against 39 GB/s.)
constexpr std::size_t kOneRowLookaheadBytes = 512;

/// What a one-row block of NR F32 weight rows asks L1 for while it reads
/// them: at each step along K, the line kOneRowLookaheadBytes ahead of the
/// step's read in each of its rows and, once that passes the rows' end, the
/// same distance into the rows of the block its thread computes next. The
/// hardware prefetchers, following NR separate rows of a few KiB, fall
/// behind the memory; a fixed distance ahead along every row keeps the loads
/// in L1 without fetching so far ahead that the lines are evicted first.
template <int NR>
struct RowLookahead {
  const std::uint8_t* rows = nullptr; // [NR, row_bytes]
  std::size_t row_bytes = 0;
  std::size_t read_bytes = 0;              // of each row: k weights
  const std::uint8_t* next_rows = nullptr; // [next_row_count, next_row_bytes] or null
  std::size_t next_row_bytes = 0;
  std::size_t next_row_count = 0;

  /// Calls fetch(address) for each line to ask for while the block reads
  /// from byte `read_offset` of its rows.
  template <typename Fetch>
  void visit(std::size_t read_offset, Fetch&& fetch) const {
    const std::size_t ahead = read_offset + kOneRowLookaheadBytes;
    if (ahead < read_bytes) {
      unrolled<NR>([&](int j) { fetch(rows + j * row_bytes + ahead); });
    } else if (next_rows != nullptr && ahead - read_bytes < next_row_bytes) {
      for (std::size_t j = 0; j < next_row_count; ++j)
        fetch(next_rows + j * next_row_bytes + (ahead - read_bytes));
    }
  }

  void step(std::size_t read_offset) const {
    visit(read_offset, [](const std::uint8_t* line) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
    });
  }
};

/// The lookahead of the one-row block of NR columns from col0 of `p`, of
/// `weight_bytes`-byte weights, that its thread follows with the columns at
/// `next` (none if next.p is null).
template <int NR>
RowLookahead<NR> row_lookahead(const detail::FloatProblem& p, std::size_t col0,
                               std::size_t weight_bytes, ColumnStart next) {
  RowLookahead<NR> ahead{p.w + col0 * p.w_row_bytes, p.w_row_bytes, p.k * weight_bytes};
  if (next.p != nullptr) {
    ahead.next_rows = next.p->w + next.col0 * next.p->w_row_bytes;
    ahead.next_row_bytes = next.p->w_row_bytes;
    ahead.next_row_count = next.columns(NR);
  }
  return ahead;
}

/// MR rows x NR columns of y. `Simd` gives the vector type `V`, `kLanes`,
/// `kRegisters` (vector registers), `zero`, `fmadd`, `load_x`,
/// `load_x_partial` (the first r < kLanes, the rest zero), `store`, `hsum`
/// and `hsum4` (four hsums in one __m128); `Weights` loads kLanes
/// consecutive weights of a row as floats (`load`, `load_partial`) stored
/// in `kBytes` each.
template <typename Simd, typename Weights>
struct FloatKernel {
  using V = typename Simd::V;
  static constexpr std::size_t kWeightBytes = Weights::kBytes;
  static constexpr std::size_t kLanes = Simd::kLanes;

  /// `prefetch` (a PrefetchCursor or a RowLookahead) asks the caches for
  /// weights at each step along K; it changes no bit.
  template <int MR, int NR, typename Prefetch = PrefetchCursor>
  __attribute__((flatten)) static void block(const detail::FloatProblem& p, std::size_t row0,
                                             std::size_t col0, Prefetch prefetch = {}) {
    const std::uint8_t* w_rows[NR];
    unrolled<NR>([&](int j) { w_rows[j] = p.w + (col0 + j) * p.w_row_bytes; });
    const float* x_rows[MR];
    unrolled<MR>([&](int i) { x_rows[i] = p.x + (row0 + i) * p.k; });
    V acc[MR][NR];
    unrolled<MR>([&](int i) { unrolled<NR>([&](int j) { acc[i][j] = Simd::zero(); }); });
    std::size_t k = 0;
    // Each operand vector in a register of its own where the registers
    // allow: left to itself, GCC folds a load into every fma that uses the
    // vector (MR loads of each weight vector, NR of each x vector, instead
    // of one), and the loads, not the fmas, then set the pace. A single row
    // uses each weight vector once, so its loads stay folded.
    constexpr bool kPinWeights = MR > 1 && MR * NR + NR + 1 <= Simd::kRegisters;
    constexpr bool kPinX = MR * NR + (MR > 1 ? NR : 0) + 1 <= Simd::kRegisters;
    for (; k + Simd::kLanes <= p.k; k += Simd::kLanes) {
      prefetch.step(k * kWeightBytes);
      V w[NR];
      unrolled<NR>([&](int j) {
        w[j] = Weights::load(w_rows[j], k);
        if constexpr (kPinWeights)
          __asm__("" : "+v"(w[j]));
      });
      unrolled<MR>([&](int i) {
        V x = Simd::load_x(x_rows[i] + k);
        if constexpr (kPinX)
          __asm__("" : "+v"(x));
        unrolled<NR>([&](int j) { acc[i][j] = Simd::fmadd(x, w[j], acc[i][j]); });
      });
    }
    if (k < p.k) {
      const std::size_t r = p.k - k;
      V w[NR];
      unrolled<NR>([&](int j) { w[j] = Weights::load_partial(w_rows[j], k, r); });
      unrolled<MR>([&](int i) {
        const V x = Simd::load_x_partial(x_rows[i] + k, r);
        unrolled<NR>([&](int j) { acc[i][j] = Simd::fmadd(x, w[j], acc[i][j]); });
      });
    }
    // The horizontal sums four at a time (hsum4), the last MR * NR % 4 one
    // by one: the same bits either way, in fewer shuffles.
    constexpr int kSums = MR * NR, kFours = kSums / 4;
    alignas(16) float sums[kSums + 3];
    const auto at = [&](int e) -> const V& { return acc[e / NR][e % NR]; };
    unrolled<kFours>([&](int f) {
      _mm_store_ps(sums + 4 * f,
                   Simd::hsum4(at(4 * f), at(4 * f + 1), at(4 * f + 2), at(4 * f + 3)));
    });
    unrolled<kSums % 4>([&](int e) { sums[4 * kFours + e] = Simd::hsum(at(4 * kFours + e)); });
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        const float sum = sums[i * NR + j];
        p.y[(row0 + i) * p.n + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
      }
  }

  /// block<1, NR> for 2-byte weights streamed from memory, with the same
  /// arithmetic and so the same bits, but its accumulators kept in L1: each
  /// step along K loads them, adds its products and stores them back.
  /// Measured on Zen 5 (F16, K = 2048 and 5632, 2 threads, one row of 8
  /// columns each asking L1 for the next block): 41-47 GB/s against 31-35
  /// with the accumulators in registers, 38-50 for a plain read of the same
  /// bytes; a TinyLlama-shaped F16 model's one-sequence decode 20-40%
  /// faster. Why is not settled; the likely cause is that the register
  /// block runs far ahead of its prefetches with loads that then wait on
  /// memory themselves. F32, whose rows are twice as long, gained nothing
  /// measurable and keeps block<1, NR> with a RowLookahead.
  template <int NR>
  static void one_row_block(const detail::FloatProblem& p, std::size_t row, std::size_t col0,
                            PrefetchCursor prefetch) {
    alignas(64) float acc[NR][kLanes] = {};
    const std::uint8_t* w_first = p.w + col0 * p.w_row_bytes;
    const float* x = p.x + row * p.k;
    std::size_t k = 0;
    for (; k + Simd::kLanes <= p.k; k += Simd::kLanes) {
      prefetch.step(k * kWeightBytes);
      const V xk = Simd::load_x(x + k);
      const std::uint8_t* w_row = w_first;
#pragma GCC unroll 1
      for (int j = 0; j < NR; ++j, w_row += p.w_row_bytes)
        Simd::store(acc[j], Simd::fmadd(xk, Weights::load(w_row, k), Simd::load_x(acc[j])));
    }
    if (k < p.k) {
      const std::size_t r = p.k - k;
      const V xk = Simd::load_x_partial(x + k, r);
      const std::uint8_t* w_row = w_first;
      for (int j = 0; j < NR; ++j, w_row += p.w_row_bytes)
        Simd::store(acc[j],
                    Simd::fmadd(xk, Weights::load_partial(w_row, k, r), Simd::load_x(acc[j])));
    }
    for (int j = 0; j < NR; ++j) {
      const float sum = Simd::hsum(Simd::load_x(acc[j]));
      p.y[row * p.n + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
    }
  }
};

// Runs Kernel over the columns [col_begin, col_end) of MR rows from row0:
// NR columns at a time, single columns at a ragged edge. One row of 2-byte
// weights (F16, BF16) asks L1 for the next block's weight rows while it
// computes, spread over its steps along K, and its last block for the NR
// columns from `after`: a row of K = 2048 F16 weights is one 4 KiB page, a
// stream too short for the hardware prefetchers to keep pace with the
// memory. (Measured on Zen 5 over a TinyLlama-sized FFN, 2 threads: 41-47
// GB/s asking L1, 38-41 asking L2; on Zen 4, asking L2 against nothing, the
// 134M model's F16 and BF16 decode-step matrices ran 15% faster with
// AVX-512, 20-25% with AVX2.) One row of F32 asks L1 for a fixed distance
// ahead along its own rows instead, then into the next block's or `after`'s
// (RowLookahead): asking for the whole next block, spread over the steps,
// made it up to 13% slower (AVX2, Zen 3) and no faster on Zen 5. Blocks of
// several rows ask L2 for the next block's rows where `fetch_next` says so
// (the first rows of a tile, which read its weights from memory; measured
// on Zen 5, the 134M model's decode at 8 sequences: F16 7% faster with
// AVX-512, F16 and F32 25-35% with AVX2).
template <typename Kernel, int MR, int NR>
inline void float_block_row(const detail::FloatProblem& p, std::size_t row0, std::size_t col_begin,
                            std::size_t col_end, ColumnStart after = {}, bool fetch_next = false) {
  constexpr bool kOneRowStream = MR == 1 && Kernel::kWeightBytes == 2;
  constexpr bool kOneRowLookahead = MR == 1 && Kernel::kWeightBytes == 4;
  const std::size_t steps = std::max<std::size_t>(p.k / Kernel::kLanes, 1);
  std::size_t col = col_begin;
  for (; col + NR <= col_end; col += NR) {
    // The block the thread computes next: the row's next whole block, else
    // (one row) the columns from `after`.
    const ColumnStart next = col + 2 * NR <= col_end ? ColumnStart{&p, col + NR}
                             : MR == 1               ? after
                                                     : ColumnStart{};
    if constexpr (kOneRowLookahead) {
      Kernel::template block<1, NR>(p, row0, col,
                                    row_lookahead<NR>(p, col, Kernel::kWeightBytes, next));
    } else {
      PrefetchCursor next_block;
      if ((kOneRowStream || fetch_next) && next.p != nullptr)
        next_block = weight_rows_cursor(*next.p, next.col0, next.columns(NR), steps, kOneRowStream);
      if constexpr (kOneRowStream)
        Kernel::template one_row_block<NR>(p, row0, col, next_block);
      else
        Kernel::template block<MR, NR>(p, row0, col, next_block);
    }
  }
  for (; col < col_end; ++col)
    Kernel::template block<MR, 1>(p, row0, col);
}

// Runs Kernel over the columns [col_begin, col_end) of the rows [row_begin,
// row_end) (a multiple of 4 apart): NR columns at a time (single columns at
// a ragged edge), each sweeping all those rows in groups of 4. In the first
// chunk of rows, each group fetches an equal slice of the next block's
// weights, spread over its steps along K (as many lines per step as that
// takes; with one line per step, 8 rows fetched a third). Spread over every
// group rather than fetched by the first ones at one line per step, the
// requests overlap less with one another: the matrices of a 134M model's
// decode step at 32 rows, all from memory, ran 2-6% faster on Zen 5.
template <typename Kernel, int NR>
inline void float_block_column(const detail::FloatProblem& p, std::size_t row_begin,
                               std::size_t row_end, std::size_t col_begin, std::size_t col_end,
                               bool first_rows) {
  const std::size_t steps = std::max<std::size_t>(p.k / Kernel::kLanes, 1);
  const std::size_t groups = (row_end - row_begin) / 4;
  const std::size_t block_lines = (NR * p.w_row_bytes + 63) / 64;
  const std::size_t slice_lines = (block_lines + groups - 1) / groups;
  const std::size_t slice_bytes = 64 * slice_lines;
  const std::size_t lines_per_step = (slice_lines + steps - 1) / steps;
  std::size_t col = col_begin;
  for (; col + NR <= col_end; col += NR) {
    const std::uint8_t* next = p.w + (col + NR) * p.w_row_bytes;
    const std::uint8_t* next_end =
        first_rows && col + 2 * NR <= col_end ? next + NR * p.w_row_bytes : next;
    for (std::size_t row = row_begin; row < row_end; row += 4) {
      const std::uint8_t* slice = next + (row - row_begin) / 4 * slice_bytes;
      Kernel::template block<4, NR>(
          p, row, col, {slice, std::min(next_end, slice + slice_bytes), lines_per_step});
    }
  }
  for (; col < col_end; ++col)
    for (std::size_t row = row_begin; row < row_end; row += 4)
      Kernel::template block<4, 1>(p, row, col);
}

// Rows of x a column block sweeps before the next one starts, when blocks go
// column-first: 32 rows of a 2048-wide x (256 KiB) stay in L2.
constexpr std::size_t kFloatRowChunk = 32;

// Computes the columns [col_begin, col_end) of y (a tile), and calls
// claim_next() once, for the columns the thread computes after it. Within a
// tile, rows go in groups of 4 (the 1-3 left over use wider column groups),
// and one of the two operands of a 4 x NR4 block comes from L2 at every step
// along K while the other stays in L1: whichever moves fewer bytes.
// Row-first, each group of rows sweeps the tile's columns, its rows in L1 and
// the tile's weights (NR4 per step) from L2, where the first group asks for
// them block by block; column-first, each block of NR4 columns sweeps up to
// kFloatRowChunk rows, its weights in L1 and the 4 rows per step from L2.
// Only AVX-512's 6 columns of F32 outweigh 4 rows (measured: 25% faster that
// way, while F16 and BF16, and AVX2's 3 columns, ran slower column-first).
// `Shapes` gives the column widths NR4, NR3, NR2 and NR1 of those row counts
// (each dividing kFloatTileCols, and NR1 kOneRowTileCols). The order of the
// blocks changes no bit: each element's arithmetic is the kernel's alone.
template <typename Kernel, typename Shapes, typename ClaimNext>
inline void run_float_tile(const detail::FloatProblem& p, std::size_t m, std::size_t col_begin,
                           std::size_t col_end, ClaimNext&& claim_next) {
  static_assert(kFloatTileCols % Shapes::NR4 == 0 && kFloatTileCols % Shapes::NR3 == 0 &&
                    kFloatTileCols % Shapes::NR2 == 0 && kFloatTileCols % Shapes::NR1 == 0 &&
                    kOneRowTileCols % Shapes::NR1 == 0,
                "block widths must divide the tile");
  const std::size_t grouped = m - m % 4;
  constexpr bool kColumnFirst = Shapes::NR4 * Kernel::kWeightBytes > 4 * sizeof(float);
  if constexpr (kColumnFirst) {
    for (std::size_t chunk = 0; chunk < grouped; chunk += kFloatRowChunk)
      float_block_column<Kernel, Shapes::NR4>(p, chunk, std::min(grouped, chunk + kFloatRowChunk),
                                              col_begin, col_end, chunk == 0);
  } else {
    for (std::size_t row = 0; row < grouped; row += 4)
      float_block_row<Kernel, 4, Shapes::NR4>(p, row, col_begin, col_end, {}, row == 0);
  }
  const std::size_t row = grouped;
  if (m - row == 1 && col_end - col_begin >= Shapes::NR1) {
    // The tile's last block asks for the first rows of the thread's next
    // columns, claimed as it starts, so that no tile's first block comes in
    // cold.
    const std::size_t last = col_begin + ((col_end - col_begin) / Shapes::NR1 - 1) * Shapes::NR1;
    float_block_row<Kernel, 1, Shapes::NR1>(p, row, col_begin, last, {&p, last});
    float_block_row<Kernel, 1, Shapes::NR1>(p, row, last, col_end, claim_next());
    return;
  }
  switch (m - row) {
  case 3:
    float_block_row<Kernel, 3, Shapes::NR3>(p, row, col_begin, col_end);
    break;
  case 2:
    float_block_row<Kernel, 2, Shapes::NR2>(p, row, col_begin, col_end);
    break;
  case 1:
    float_block_row<Kernel, 1, Shapes::NR1>(p, row, col_begin, col_end);
    break;
  default:
    break;
  }
  claim_next();
}

// Most weights one run_float_tiles call takes.
constexpr std::size_t kMaxFloatProblems = 4;

/// Computes `count` <= kMaxFloatProblems products of the same m rows (q, k
/// and v of one input, say) tile by tile, all their tiles in one parallel
/// region: one fork and join for all of them, and the threads balance over
/// their tiles together (a 192-column k or v has 4 tiles of 48 for 2
/// threads).
/// Each thread takes tiles from a shared counter, its next one as it starts
/// the last block of the current one, until none is left: which thread
/// computes a tile never changes its bits, a thread slowed by other work on
/// its core takes fewer, and a tile's last block knows whose rows to ask the
/// caches for.
template <typename Kernel, typename Shapes>
inline void run_float_tiles(const detail::FloatProblem* problems, std::size_t count,
                            std::size_t m) {
  const std::size_t tile_cols = m == 1 ? kOneRowTileCols : kFloatTileCols;
  std::size_t first_tile[kMaxFloatProblems + 1] = {};
  std::size_t macs = 0;
  for (std::size_t i = 0; i < count; ++i) {
    first_tile[i + 1] = first_tile[i] + (problems[i].n + tile_cols - 1) / tile_cols;
    macs += m * problems[i].n * problems[i].k;
  }
  const std::size_t n_tiles = first_tile[count];
  const auto start_of = [&](std::size_t tile) -> ColumnStart {
    if (tile >= n_tiles)
      return {};
    std::size_t i = 0;
    while (tile >= first_tile[i + 1])
      ++i;
    return {&problems[i], (tile - first_tile[i]) * tile_cols};
  };
  std::atomic<std::size_t> next_tile{0};
#pragma omp parallel if (macs >= kFloatParallelMinMacs)
  {
    std::size_t tile = next_tile.fetch_add(1, std::memory_order_relaxed);
    while (tile < n_tiles) {
      const ColumnStart current = start_of(tile);
      run_float_tile<Kernel, Shapes>(*current.p, m, current.col0,
                                     std::min(current.p->n, current.col0 + tile_cols), [&] {
                                       tile = next_tile.fetch_add(1, std::memory_order_relaxed);
                                       return start_of(tile);
                                     });
    }
  }
}

/// run_float_tiles with the kernel of `type`'s weights (F32, F16 or BF16),
/// loaded by F32W, F16W or Bf16W: each instruction set's file picks its own
/// loaders and block shapes here.
template <typename Simd, typename Shapes, typename F32W, typename F16W, typename Bf16W>
inline void run_float_tiles_of(TensorType type, const detail::FloatProblem* problems,
                               std::size_t count, std::size_t m) {
  switch (type) {
  case TensorType::F32:
    return run_float_tiles<FloatKernel<Simd, F32W>, Shapes>(problems, count, m);
  case TensorType::F16:
    return run_float_tiles<FloatKernel<Simd, F16W>, Shapes>(problems, count, m);
  default:
    return run_float_tiles<FloatKernel<Simd, Bf16W>, Shapes>(problems, count, m);
  }
}

} // namespace
} // namespace caflm
