// Cost of one Sampler::sample call on a 32000-token vocabulary, per sampling mode, with and
// without top logprobs, on two kinds of logit rows: "peaked" (a trained model's: a few tokens
// far above a broad bulk) and "flat" (a random-weight model's: every token within a few units,
// so a draw walks deep into the sorted order).
#include "caflm/sampling/sampler.hpp"

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

using namespace caflm;

namespace {

constexpr std::size_t kVocab = 32000;
constexpr std::size_t kRows = 16;

enum class Shape { peaked, flat };

/// kRows rows of logits [kRows, kVocab], cycled through so that the branch predictor and the
/// caches do not see the same row every call.
std::vector<float> logit_rows(Shape shape) {
  std::mt19937 rng(42);
  std::vector<float> rows(kRows * kVocab);
  if (shape == Shape::peaked) {
    std::normal_distribution<float> bulk(0.0f, 2.5f);
    std::uniform_int_distribution<std::size_t> any_token(0, kVocab - 1);
    for (std::size_t r = 0; r < kRows; ++r) {
      float* row = rows.data() + r * kVocab;
      for (std::size_t i = 0; i < kVocab; ++i)
        row[i] = bulk(rng);
      // A handful of plausible continuations well above the bulk.
      for (int k = 0; k < 8; ++k)
        row[any_token(rng)] = 14.0f + static_cast<float>(k) * 0.25f;
    }
  } else {
    std::normal_distribution<float> bulk(0.0f, 0.5f);
    for (float& x : rows)
      x = bulk(rng);
  }
  return rows;
}

enum class Mode { greedy, top_k_40, top_p_09, temperature };

SamplingParams params_for(Mode mode, std::uint32_t top_logprobs) {
  SamplingParams params;
  params.seed = 7;
  params.top_logprobs = top_logprobs;
  switch (mode) {
  case Mode::greedy:
    params.temperature = 0.0f;
    break;
  case Mode::top_k_40:
    params.temperature = 0.8f;
    params.top_k = 40;
    break;
  case Mode::top_p_09:
    params.temperature = 0.8f;
    params.top_p = 0.9f;
    break;
  case Mode::temperature:
    params.temperature = 0.8f;
    break;
  }
  return params;
}

/// state.range(0): top_logprobs; state.range(1): 0 = peaked rows, 1 = flat rows.
void run_sampler(benchmark::State& state, Mode mode) {
  const auto top_logprobs = static_cast<std::uint32_t>(state.range(0));
  const std::vector<float> rows = logit_rows(state.range(1) == 0 ? Shape::peaked : Shape::flat);
  const SamplingParams params = params_for(mode, top_logprobs);
  Sampler sampler(kVocab);
  std::vector<TokenLogprob> top(kMaxTopLogprobs);
  std::uint64_t step = 0;
  for (auto _ : state) {
    const float* row = rows.data() + (step % kRows) * kVocab;
    const SampleResult result =
        sampler.sample(row, params, nullptr, 0, step, nullptr, 0, top.data());
    benchmark::DoNotOptimize(result);
    ++step;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_SampleGreedy(benchmark::State& state) {
  run_sampler(state, Mode::greedy);
}
void BM_SampleTopK40(benchmark::State& state) {
  run_sampler(state, Mode::top_k_40);
}
void BM_SampleTopP09(benchmark::State& state) {
  run_sampler(state, Mode::top_p_09);
}
void BM_SampleTemperature(benchmark::State& state) {
  run_sampler(state, Mode::temperature);
}

/// {top_logprobs} x {peaked, flat}.
void sampler_args(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"top_logprobs", "flat"});
  for (const int flat : {0, 1})
    for (const int top_logprobs : {0, 5})
      bench->Args({top_logprobs, flat});
}

} // namespace

BENCHMARK(BM_SampleGreedy)->Apply(sampler_args);
BENCHMARK(BM_SampleTopK40)->Apply(sampler_args);
BENCHMARK(BM_SampleTopP09)->Apply(sampler_args);
BENCHMARK(BM_SampleTemperature)->Apply(sampler_args);

BENCHMARK_MAIN();
