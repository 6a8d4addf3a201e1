// How run_float_tiles hands columns to the threads and what each block asks
// the caches for, seen through kernels that record their calls instead of
// computing.
#include "caflm/cpu/float_matmul_kernels.hpp"

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "tests/support/omp_threads.hpp"

using namespace caflm;
using caflm::testing::OmpThreads;

namespace {

constexpr int kBlockCols = 8;

/// Block widths: one row's kBlockCols, 4 rows' 3 (row-first with 2-byte
/// weights); 2 and 3 rows' unused.
struct RecordedShapes {
  static constexpr int NR4 = 3, NR3 = 4, NR2 = 6, NR1 = kBlockCols;
};

/// One kernel call: the product, its first row and column, its width, the
/// weight bytes its prefetch cursor reaches over the block's steps along K,
/// or the lines its row lookahead asks for over them.
struct Call {
  const detail::FloatProblem* p;
  std::size_t row0;
  std::size_t col0;
  int cols;
  const std::uint8_t* prefetch_begin;
  const std::uint8_t* prefetch_end;
  std::set<const std::uint8_t*> lookahead_lines;
};

std::vector<std::vector<Call>>* recorded = nullptr;

/// A kernel of `kBytes`-byte weights that records each call in its
/// thread's list: 2 bytes, one row's blocks prefetch and blocks of 4 rows
/// go row-first; 4 bytes, one row's blocks read ahead along their rows and
/// blocks of 4 rows and 6 columns go column-first (run_float_tile).
template <std::size_t kBytes>
struct RecordingKernel {
  static constexpr std::size_t kWeightBytes = kBytes;
  static constexpr std::size_t kLanes = 16;

  template <int MR, int NR>
  static void block(const detail::FloatProblem& p, std::size_t row0, std::size_t col0,
                    PrefetchCursor prefetch = {}) {
    const std::uint8_t* begin = prefetch.line;
    const std::uint8_t* end = begin;
    if (begin != nullptr && begin < prefetch.end) {
      const std::size_t reach = 64 * prefetch.lines_per_step * (p.k / kLanes);
      end = reach < static_cast<std::size_t>(prefetch.end - begin) ? begin + reach : prefetch.end;
    }
    (*recorded)[omp_get_thread_num()].push_back({&p, row0, col0, NR, begin, end, {}});
  }

  template <int MR, int NR>
  static void block(const detail::FloatProblem& p, std::size_t row0, std::size_t col0,
                    RowLookahead<NR> lookahead) {
    std::set<const std::uint8_t*> lines;
    for (std::size_t k = 0; k + kLanes <= p.k; k += kLanes)
      lookahead.visit(k * kBytes, [&](const std::uint8_t* line) { lines.insert(line); });
    (*recorded)[omp_get_thread_num()].push_back(
        {&p, row0, col0, NR, nullptr, nullptr, std::move(lines)});
  }

  template <int NR>
  static void one_row_block(const detail::FloatProblem& p, std::size_t row, std::size_t col0,
                            PrefetchCursor prefetch) {
    block<1, NR>(p, row, col0, prefetch);
  }
};

/// Block widths with which 4-byte weights go column-first: 4 rows by 6.
struct ColumnFirstShapes {
  static constexpr int NR4 = 6, NR3 = 6, NR2 = 8, NR1 = 8;
};

/// The calls each of `threads` threads makes, as run_float_tiles hands
/// them the tiles of `count` products of m rows.
template <typename Kernel, typename Shapes>
std::vector<std::vector<Call>> record_calls(const detail::FloatProblem* problems, std::size_t count,
                                            std::size_t m, int threads) {
  std::vector<std::vector<Call>> calls(threads);
  recorded = &calls;
  const OmpThreads team(threads);
  run_float_tiles<Kernel, Shapes>(problems, count, m);
  recorded = nullptr;
  return calls;
}

/// Three products of one row in one call (q, k and v, say), each with a
/// ragged last tile, and enough multiply-adds to run in parallel: rows of
/// kK weights of `weight_bytes` bytes.
struct ThreeProducts {
  static constexpr std::size_t kK = 1024;
  static constexpr std::size_t kWidths[3] = {203, 96, 40};
  std::vector<std::vector<std::uint8_t>> weights;
  std::vector<std::vector<float>> y;
  std::vector<float> x = std::vector<float>(kK);
  detail::FloatProblem problems[3];

  explicit ThreeProducts(std::size_t weight_bytes) {
    for (std::size_t i = 0; i < 3; ++i) {
      weights.emplace_back(kWidths[i] * kK * weight_bytes);
      y.emplace_back(kWidths[i]);
      problems[i] = {weights[i].data(), kK * weight_bytes, x.data(), kK,
                     kWidths[i],        y[i].data(),       nullptr};
    }
  }
};

} // namespace

TEST_CASE("column-first blocks fetch all of the next block's weights, however few their rows",
          "[float_matmul][prefetch]") {
  // One tile of 48 columns: 8 blocks of 6, each sweeping all rows in groups
  // of 4; K = 768 is 48 steps of 16.
  constexpr std::size_t k = 768, n = 48, row_bytes = 4 * k;
  std::vector<float> weights(n * k), y(32 * n), x(32 * k);
  const auto* w = reinterpret_cast<const std::uint8_t*>(weights.data());
  for (std::size_t m : {4, 8, 16, 32}) {
    INFO(m << " rows");
    const detail::FloatProblem problem{w, row_bytes, x.data(), k, n, y.data(), nullptr};
    const std::vector<std::vector<Call>> calls =
        record_calls<RecordingKernel<4>, ColumnFirstShapes>(&problem, 1, m, 1);
    REQUIRE(calls[0].size() == (n / 6) * (m / 4));
    for (std::size_t col0 = 0; col0 + 6 < n; col0 += 6) {
      INFO("block at column " << col0);
      // Each line of the next block's 6 weight rows, asked for by some
      // group of this block.
      std::vector<bool> fetched(6 * row_bytes / 64, false);
      const std::uint8_t* next = w + (col0 + 6) * row_bytes;
      for (const Call& call : calls[0])
        if (call.col0 == col0)
          for (const std::uint8_t* line = call.prefetch_begin; line < call.prefetch_end;
               line += 64) {
            REQUIRE(line >= next);
            REQUIRE(line < next + 6 * row_bytes);
            fetched[static_cast<std::size_t>(line - next) / 64] = true;
          }
      CHECK(std::count(fetched.begin(), fetched.end(), true) ==
            static_cast<std::ptrdiff_t>(fetched.size()));
    }
  }
}

TEST_CASE("each one-row block prefetches the block its thread computes next",
          "[float_matmul][prefetch]") {
  // The threads take the tiles in whatever order they reach them.
  const ThreeProducts products(2);
  const detail::FloatProblem* problems = products.problems;
  const auto& widths = ThreeProducts::kWidths;
  for (int threads : {1, 2, 4}) {
    INFO(threads << " threads");
    const std::vector<std::vector<Call>> calls =
        record_calls<RecordingKernel<2>, RecordedShapes>(problems, 3, 1, threads);

    std::vector<std::vector<int>> computed(3);
    for (std::size_t i = 0; i < 3; ++i)
      computed[i].assign(widths[i], 0);
    for (const std::vector<Call>& thread_calls : calls) {
      std::vector<const Call*> blocks;
      for (const Call& call : thread_calls) {
        const auto i = static_cast<std::size_t>(call.p - problems);
        REQUIRE(i < 3);
        REQUIRE(call.col0 + call.cols <= widths[i]);
        for (std::size_t col = call.col0; col < call.col0 + call.cols; ++col)
          ++computed[i][col];
        if (call.cols == kBlockCols)
          blocks.push_back(&call);
        else
          REQUIRE(call.prefetch_begin == call.prefetch_end); // a ragged edge's single column
      }
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        INFO("block " << b << " of " << blocks.size());
        if (b + 1 == blocks.size()) {
          REQUIRE(blocks[b]->prefetch_begin == blocks[b]->prefetch_end);
          continue;
        }
        const Call& next = *blocks[b + 1];
        const std::uint8_t* rows = next.p->w + next.col0 * next.p->w_row_bytes;
        REQUIRE(blocks[b]->prefetch_begin == rows);
        REQUIRE(blocks[b]->prefetch_end == rows + kBlockCols * next.p->w_row_bytes);
      }
    }
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("product " << i);
      REQUIRE(std::count(computed[i].begin(), computed[i].end(), 1) ==
              static_cast<std::ptrdiff_t>(widths[i]));
    }
  }
}

TEST_CASE("row-first blocks of the first rows fetch the next block's weights",
          "[float_matmul][prefetch]") {
  // 2-byte weights in blocks of 4 rows and 3 columns go row-first: the
  // first 4 rows sweep the tile's columns from memory, the next ones find
  // them in the caches.
  constexpr std::size_t k = 1024, n = 48, row_bytes = 2 * k;
  std::vector<std::uint16_t> weights(n * k);
  std::vector<float> x(8 * k), y(8 * n);
  const detail::FloatProblem problem{reinterpret_cast<const std::uint8_t*>(weights.data()),
                                     row_bytes,
                                     x.data(),
                                     k,
                                     n,
                                     y.data(),
                                     nullptr};
  const std::vector<std::vector<Call>> calls =
      record_calls<RecordingKernel<2>, RecordedShapes>(&problem, 1, 8, 1);
  REQUIRE(calls[0].size() == 2 * n / 3);
  for (const Call& call : calls[0]) {
    INFO("rows from " << call.row0 << ", columns from " << call.col0);
    REQUIRE(call.cols == 3);
    if (call.row0 == 0 && call.col0 + 3 < n) {
      const std::uint8_t* next = problem.w + (call.col0 + 3) * row_bytes;
      CHECK(call.prefetch_begin == next);
      CHECK(call.prefetch_end == next + 3 * row_bytes);
    } else {
      CHECK(call.prefetch_begin == call.prefetch_end);
    }
  }
}

TEST_CASE("one-row F32 blocks read ahead along their rows, then into the block their thread "
          "computes next",
          "[float_matmul][prefetch]") {
  // The products of the 2-byte test above, with F32 weights: rows of 4
  // KiB, 64 steps of 16 weights (one line each).
  const ThreeProducts products(4);
  constexpr std::size_t row_bytes = 4 * ThreeProducts::kK;
  // The lines [from, to) bytes into each of `count` weight rows from `rows`.
  const auto lines_of = [](const std::uint8_t* rows, std::size_t count, std::size_t from,
                           std::size_t to) {
    std::set<const std::uint8_t*> lines;
    for (std::size_t j = 0; j < count; ++j)
      for (std::size_t at = from; at < to; at += 64)
        lines.insert(rows + j * row_bytes + at);
    return lines;
  };
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    const std::vector<std::vector<Call>> calls =
        record_calls<RecordingKernel<4>, RecordedShapes>(products.problems, 3, 1, threads);
    for (const std::vector<Call>& thread_calls : calls) {
      std::vector<const Call*> blocks;
      for (const Call& call : thread_calls)
        if (call.cols == kBlockCols)
          blocks.push_back(&call);
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        INFO("block " << b << " of " << blocks.size());
        const Call& block = *blocks[b];
        // Its own rows from kOneRowLookaheadBytes on, the distance it reads
        // ahead ...
        std::set<const std::uint8_t*> expected = lines_of(
            block.p->w + block.col0 * row_bytes, kBlockCols, kOneRowLookaheadBytes, row_bytes);
        // ... then the first kOneRowLookaheadBytes of the next block's rows.
        if (b + 1 < blocks.size()) {
          const Call& next = *blocks[b + 1];
          const std::set<const std::uint8_t*> next_lines = lines_of(
              next.p->w + next.col0 * row_bytes,
              std::min<std::size_t>(kBlockCols, next.p->n - next.col0), 0, kOneRowLookaheadBytes);
          expected.insert(next_lines.begin(), next_lines.end());
        }
        CHECK(block.lookahead_lines == expected);
      }
    }
  }
}
