// How run_float_tiles hands one row's columns to the threads, seen through a
// kernel that records its calls instead of computing.
#include "caflm/cpu/float_matmul_kernels.hpp"

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/support/omp_threads.hpp"

using namespace caflm;
using caflm::testing::OmpThreads;

namespace {

constexpr int kBlockCols = 8;

/// Block widths with one row's of kBlockCols (the others unused at m = 1).
struct RecordedShapes {
  static constexpr int NR4 = 3, NR3 = 4, NR2 = 6, NR1 = kBlockCols;
};

/// One kernel call: the product, its first column and width, and the weight
/// bytes its prefetch cursor covers.
struct Call {
  const detail::FloatProblem* p;
  std::size_t col0;
  int cols;
  const std::uint8_t* prefetch_begin;
  const std::uint8_t* prefetch_end;
};

std::vector<std::vector<Call>>* recorded = nullptr;

/// A kernel of 2-byte weights (whose one-row blocks prefetch) that records
/// each call in its thread's list.
struct RecordingKernel {
  static constexpr std::size_t kWeightBytes = 2;
  static constexpr std::size_t kLanes = 16;

  template <int MR, int NR>
  static void block(const detail::FloatProblem& p, std::size_t, std::size_t col0,
                    PrefetchCursor prefetch = {}) {
    (*recorded)[omp_get_thread_num()].push_back({&p, col0, NR, prefetch.line, prefetch.end});
  }

  template <int NR>
  static void one_row_block(const detail::FloatProblem& p, std::size_t row, std::size_t col0,
                            PrefetchCursor prefetch) {
    block<1, NR>(p, row, col0, prefetch);
  }
};

} // namespace

TEST_CASE("each one-row block prefetches the block its thread computes next",
          "[float_matmul][prefetch]") {
  // Three products in one call (q, k and v, say), each with a ragged last
  // tile, and enough multiply-adds to run in parallel; the threads take the
  // tiles in whatever order they reach them.
  constexpr std::size_t k = 1024;
  const std::size_t widths[] = {203, 96, 40};
  std::vector<std::vector<std::uint16_t>> weights;
  detail::FloatProblem problems[3];
  std::vector<float> x(k);
  std::vector<std::vector<float>> y;
  for (std::size_t i = 0; i < 3; ++i) {
    weights.emplace_back(widths[i] * k);
    y.emplace_back(widths[i]);
    problems[i] = {reinterpret_cast<const std::uint8_t*>(weights[i].data()),
                   k * 2,
                   x.data(),
                   k,
                   widths[i],
                   y[i].data(),
                   nullptr};
  }
  for (int threads : {1, 2, 4}) {
    INFO(threads << " threads");
    std::vector<std::vector<Call>> calls(threads);
    recorded = &calls;
    const OmpThreads team(threads);
    run_float_tiles<RecordingKernel, RecordedShapes>(problems, 3, 1);
    recorded = nullptr;

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
