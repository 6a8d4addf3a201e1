// The GPU sampler (cuda/device_sampler.cuh) against the host Sampler
// (sampling/sampler.hpp) on random logits: greedy and stochastic rows,
// penalties, bans, NaN and infinite logits, top logprobs and batch
// invariance. GPU cases skip with the reason when no CUDA device is usable;
// the key encoding, the memory layout and the batch checks run everywhere.

#include "caflm/cuda/device_sampler.cuh"
#include "caflm/cuda/device_sampler.hpp"
#include "caflm/sampling/philox.hpp"
#include "caflm/sampling/sampler.hpp"
#include "tests/cuda/gpu_test.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

using namespace caflm;
using namespace caflm::cuda;

using caflm::testing::DeviceArray;

namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Logprobs: both sides take each exp rounded alike and sum them in double,
/// in different orders (the host in id order, the device in a tree), so the
/// log-normalizers agree to a float ulp or two of values up to ~20: 1e-5.
constexpr float kLogprobTolerance = 1e-5f;

/// Random logits [rows, vocab]: normal with a spread LLM rows have, so that
/// the distributions are peaked but not one-hot.
std::vector<float> random_logits(std::uint32_t rows, std::uint32_t vocab, float spread,
                                 std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> logits(std::size_t{rows} * vocab);
  for (auto& logit : logits)
    logit = dist(rng);
  return logits;
}

/// One request as the host Sampler takes it.
struct HostRequest {
  SamplingParams params;
  std::vector<TokenId> history;
  std::vector<TokenId> banned;
  std::uint64_t step = 0;
};

/// A sample batch in host memory, built spec by spec.
struct HostBatch {
  std::vector<RaggedSampleSpec> specs;
  std::vector<TokenId> penalty_tokens;
  std::vector<std::uint32_t> penalty_counts;
  std::vector<TokenId> banned;

  /// Appends the spec of `request` sampling logits row `item`: the penalty
  /// list is the history window's distinct tokens with their counts, the
  /// uniform the one the host draws at (seed, step).
  void add(std::uint32_t item, const HostRequest& request) {
    const SamplingParams& params = request.params;
    RaggedSampleSpec spec{};
    spec.item = item;
    spec.temperature = params.temperature;
    spec.top_k = params.top_k;
    spec.top_p = params.top_p;
    spec.min_p = params.min_p;
    spec.repetition_penalty = params.repetition_penalty;
    spec.presence_penalty = params.presence_penalty;
    spec.frequency_penalty = params.frequency_penalty;
    spec.uniform = counter_uniform(params.seed.value_or(0), request.step);
    spec.top_logprobs = params.top_logprobs;
    const std::size_t window =
        params.penalty_last_n < 0
            ? request.history.size()
            : std::min(request.history.size(), static_cast<std::size_t>(params.penalty_last_n));
    std::map<TokenId, std::uint32_t> counts;
    for (std::size_t i = request.history.size() - window; i < request.history.size(); ++i)
      ++counts[request.history[i]];
    spec.penalty_offset = static_cast<std::uint32_t>(penalty_tokens.size());
    spec.penalty_count = static_cast<std::uint32_t>(counts.size());
    for (const auto& [token, count] : counts) {
      penalty_tokens.push_back(token);
      penalty_counts.push_back(count);
    }
    spec.banned_offset = static_cast<std::uint32_t>(banned.size());
    spec.banned_count = static_cast<std::uint32_t>(request.banned.size());
    banned.insert(banned.end(), request.banned.begin(), request.banned.end());
    specs.push_back(spec);
  }

  RaggedSampleBatch view() const {
    return {specs.data(),
            static_cast<std::uint32_t>(specs.size()),
            penalty_tokens.data(),
            penalty_counts.data(),
            static_cast<std::uint32_t>(penalty_tokens.size()),
            banned.data(),
            static_cast<std::uint32_t>(banned.size())};
  }
};

/// What one spec came back with.
struct Sampled {
  RaggedSampleResult result;
  std::vector<RaggedTopLogprob> top; // [top_count]
};

/// Runs `batch` over the logits [rows, vocab] on the device.
std::vector<Sampled> sample_on_device(DeviceSampler& sampler, const std::vector<float>& logits,
                                      std::uint32_t rows, const HostBatch& batch) {
  DeviceArray<float> device_logits(logits);
  const std::size_t count = batch.specs.size();
  std::vector<RaggedSampleResult> results(count);
  std::vector<RaggedTopLogprob> tops(count * kMaxSampleTopLogprobs);
  cudaStream_t stream = nullptr;
  CAFLM_CUDA_CHECK(cudaStreamCreate(&stream));
  try {
    sampler.sample(device_logits.get(), rows, batch.view(), results.data(), tops.data(), stream);
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  CAFLM_CUDA_CHECK(cudaStreamDestroy(stream));
  std::vector<Sampled> sampled(count);
  for (std::size_t i = 0; i < count; ++i) {
    sampled[i].result = results[i];
    const auto* row = tops.data() + i * kMaxSampleTopLogprobs;
    sampled[i].top.assign(row, row + results[i].top_count);
  }
  return sampled;
}

/// The host Sampler's answer for `request` on one row of logits.
struct HostAnswer {
  SampleResult result;
  std::vector<TokenLogprob> top;
};

HostAnswer sample_on_host(Sampler& sampler, const float* row, const HostRequest& request) {
  HostAnswer answer;
  answer.top.resize(std::min<std::size_t>(request.params.top_logprobs, sampler.vocab_size()));
  // The device computes every chosen token's logprob; ask the host for it too.
  SamplingParams params = request.params;
  params.logprobs = true;
  answer.result =
      sampler.sample(row, params, request.history.data(), request.history.size(), request.step,
                     request.banned.data(), request.banned.size(), answer.top.data());
  return answer;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

bool close(float a, float b, float tolerance) {
  return (std::isnan(a) && std::isnan(b)) || a == b || std::fabs(a - b) <= tolerance;
}

/// Checks one device answer against the host's: same token, NaN count and
/// top ids; logprobs within kLogprobTolerance.
void check_matches(const Sampled& device, const HostAnswer& host, const std::string& what) {
  INFO(what);
  CHECK(device.result.token == host.result.token);
  CHECK(device.result.nan_logits == host.result.nan_logits);
  if (!close(device.result.logprob, host.result.logprob, kLogprobTolerance))
    FAIL_CHECK("logprob: device " << device.result.logprob << ", host " << host.result.logprob);
  REQUIRE(device.top.size() == host.top.size());
  for (std::size_t i = 0; i < host.top.size(); ++i) {
    INFO("top logprob " << i);
    CHECK(device.top[i].token == host.top[i].token);
    if (!close(device.top[i].logprob, host.top[i].logprob, kLogprobTolerance))
      FAIL_CHECK("device " << device.top[i].logprob << ", host " << host.top[i].logprob);
  }
}

bool bitwise_equal(const Sampled& a, const Sampled& b) {
  if (std::memcmp(&a.result, &b.result, sizeof a.result) != 0 || a.top.size() != b.top.size())
    return false;
  return a.top.empty() ||
         std::memcmp(a.top.data(), b.top.data(), a.top.size() * sizeof(RaggedTopLogprob)) == 0;
}

TokenId random_token(std::mt19937& rng, std::uint32_t vocab) {
  return static_cast<TokenId>(rng() % vocab);
}

/// A history of `length` tokens drawn from a few ids, so that tokens repeat.
std::vector<TokenId> random_history(std::uint32_t vocab, std::size_t length, std::mt19937& rng) {
  std::vector<TokenId> pool(12);
  std::uniform_int_distribution<TokenId> any(0, vocab - 1);
  for (auto& token : pool)
    token = any(rng);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::vector<TokenId> history(length);
  for (auto& token : history)
    token = pool[pick(rng)];
  return history;
}

/// The sampling mixes the stochastic cases cycle through.
std::vector<SamplingParams> stochastic_mixes() {
  std::vector<SamplingParams> mixes;
  const auto mix = [&](float temperature, std::int32_t top_k, float top_p, float min_p,
                       float repetition, float presence, float frequency) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    params.repetition_penalty = repetition;
    params.presence_penalty = presence;
    params.frequency_penalty = frequency;
    params.penalty_last_n = -1;
    mixes.push_back(params);
  };
  mix(1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);    // the whole vocabulary
  mix(0.7f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);   // top_k
  mix(1.3f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f);    // top_p
  mix(0.8f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f);   // min_p
  mix(1.0f, 50, 0.95f, 0.02f, 1.0f, 0.0f, 0.0f); // all three
  mix(0.5f, -1, 0.5f, 0.0f, 1.3f, 0.5f, 0.3f);   // penalties
  mix(1.0f, 1, 1.0f, 0.0f, 1.1f, 0.0f, 0.0f);    // top_k 1: the penalized argmax
  mix(2.0f, 0, 0.01f, 0.0f, 1.0f, -0.5f, 0.0f);  // a tiny nucleus
  mix(1.5f, 1000, 0.99f, 0.001f, 0.9f, 0.2f, -0.1f);
  return mixes;
}

} // namespace

// -- host-side logic: runs without a device -------------------------------------

TEST_CASE("descending_logit_key orders logits descending and round-trips") {
  const std::vector<float> ascending = {-kInfinity, -1e30f, -3.5f, -1.0f, -1e-40f, 0.0f,
                                        1e-40f,     1e-7f,  1.0f,  2.5f,  3e38f,   kInfinity};
  for (std::size_t i = 0; i < ascending.size(); ++i) {
    INFO("value " << ascending[i]);
    const std::uint32_t key = descending_logit_key(ascending[i]);
    CHECK(key < kBannedKey);
    CHECK(logit_of_key(key) == ascending[i]);
    if (i > 0)
      CHECK(key < descending_logit_key(ascending[i - 1]));
  }
  // -0 compares equal to +0, so it must tie with it.
  CHECK(descending_logit_key(-0.0f) == descending_logit_key(0.0f));
  CHECK(descending_logit_key(-kInfinity) < kBannedKey);
}

TEST_CASE("device_sampler_layout places aligned, disjoint arrays of the right sizes") {
  const DeviceSamplerCapacity capacity{32000, 64, 4096, 128};
  const DeviceSamplerLayout layout = device_sampler_layout(capacity);
  const std::uint64_t row_items = std::uint64_t{64} * 32000;
  struct Array {
    std::uint64_t offset;
    std::uint64_t bytes;
  };
  const std::vector<Array> arrays = {
      {layout.specs, 64 * sizeof(DeviceSampleSpec)},
      {layout.begin_offsets, 64 * sizeof(int)},
      {layout.end_offsets, 64 * sizeof(int)},
      {layout.penalty_tokens, 4096 * sizeof(TokenId)},
      {layout.penalty_counts, 4096 * sizeof(std::uint32_t)},
      {layout.banned, 128 * sizeof(TokenId)},
      {layout.row_states, 64 * sizeof(DeviceRowState)},
      {layout.results, 64 * sizeof(RaggedSampleResult)},
      {layout.top_logprobs, 64 * kMaxSampleTopLogprobs * sizeof(RaggedTopLogprob)},
      {layout.keys[0], row_items * 4},
      {layout.ids[0], row_items * 4},
      {layout.keys[1], row_items * 4},
      {layout.ids[1], row_items * 4},
      {layout.sort_scratch, kSortScratchReserve},
  };
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    INFO("array " << i);
    CHECK(arrays[i].offset % 256 == 0);
    CHECK(arrays[i].offset + arrays[i].bytes <= layout.total_bytes);
    for (std::size_t j = 0; j < i; ++j) {
      const bool disjoint = arrays[i].offset >= arrays[j].offset + arrays[j].bytes ||
                            arrays[j].offset >= arrays[i].offset + arrays[i].bytes;
      CHECK(disjoint);
    }
  }
  // The upload region holds exactly the arrays the host stages.
  CHECK(layout.upload_bytes == layout.banned + 128 * sizeof(TokenId));
  CHECK(layout.row_states >= layout.upload_bytes);
  CHECK(device_sampler_bytes(32000, 64, 4096, 128) == layout.total_bytes);
  CHECK(device_sampler_bytes(32000, 65, 4096, 128) > layout.total_bytes);
  CHECK(device_sampler_bytes(32001, 64, 4096, 128) > layout.total_bytes);
  CHECK(device_sampler_bytes(32000, 64, 8192, 128) > layout.total_bytes);
  CHECK(device_sampler_bytes(32000, 64, 4096, 1024) > layout.total_bytes);
}

TEST_CASE("device_sampler_bytes refuses unusable capacities") {
  CHECK_THROWS_AS(device_sampler_bytes(1, 8, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(device_sampler_bytes(kMaxDeviceSamplerVocab + 1, 8, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(device_sampler_bytes(1000, 0, 0, 0), std::invalid_argument);
  // 8192 rows of 262144 logits pass 2^31 - 1 sort items.
  CHECK_THROWS_AS(device_sampler_bytes(262144, 8192, 0, 0), std::invalid_argument);
  CHECK_NOTHROW(device_sampler_bytes(262144, 8191, 0, 0));
  CHECK_NOTHROW(device_sampler_bytes(2, 1, 0, 0));
}

TEST_CASE("check_sample_batch refuses what the device cannot sample") {
  constexpr std::uint32_t kVocab = 8;
  const DeviceSamplerCapacity capacity{kVocab, 4, 16, 16};
  std::vector<std::uint8_t> marks(kVocab, 0);
  std::vector<RaggedSampleSpec> specs(2);
  for (auto& spec : specs) {
    spec = RaggedSampleSpec{};
    spec.repetition_penalty = 1.0f;
    spec.top_p = 1.0f;
    spec.uniform = 0.5f;
  }
  specs[0].item = 0;
  specs[0].temperature = 0.0f;
  specs[1].item = 1;
  specs[1].temperature = 0.8f;
  std::vector<TokenId> penalty_tokens = {1, 2, 3};
  std::vector<std::uint32_t> penalty_counts = {1, 2, 1};
  // Eight entries, seven distinct tokens of the vocabulary and one outside.
  std::vector<TokenId> banned = {0, 1, 2, 3, 4, 5, 6, 6, 100};
  const auto batch = [&]() {
    return RaggedSampleBatch{specs.data(),
                             static_cast<std::uint32_t>(specs.size()),
                             penalty_tokens.data(),
                             penalty_counts.data(),
                             static_cast<std::uint32_t>(penalty_tokens.size()),
                             banned.data(),
                             static_cast<std::uint32_t>(banned.size())};
  };
  const auto check_marks_clear = [&]() {
    CHECK(std::all_of(marks.begin(), marks.end(), [](std::uint8_t m) { return m == 0; }));
  };

  SECTION("a valid batch passes and counts its drawing specs") {
    specs[1].penalty_count = 3;
    specs[1].banned_count = 9; // token 7 stays allowed
    CHECK(check_sample_batch(batch(), 2, capacity, marks.data()) == 1);
    check_marks_clear();
  }
  SECTION("every token banned") {
    banned[8] = 7;
    specs[1].banned_count = 9;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    check_marks_clear();
  }
  SECTION("an item outside the logits rows") {
    CHECK_THROWS_AS(check_sample_batch(batch(), 1, capacity, marks.data()), std::invalid_argument);
  }
  SECTION("more specs than the capacity") {
    specs.resize(5, specs[0]);
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
  }
  SECTION("more list entries than the capacity") {
    penalty_tokens.assign(17, 1);
    penalty_counts.assign(17, 1);
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
  }
  SECTION("top_logprobs above 20") {
    specs[0].top_logprobs = 21;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[0].top_logprobs = 20;
    CHECK_NOTHROW(check_sample_batch(batch(), 2, capacity, marks.data()));
  }
  SECTION("list ranges outside the arrays") {
    specs[0].penalty_offset = 2;
    specs[0].penalty_count = 2;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[0].penalty_offset = 0xFFFFFFFFu; // offset + count wraps around
    specs[0].penalty_count = 2;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[0].penalty_offset = 0;
    specs[0].penalty_count = 0;
    specs[1].banned_offset = 5;
    specs[1].banned_count = 5;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
  }
  SECTION("a penalty token twice in one spec") {
    penalty_tokens = {1, 2, 1};
    specs[1].penalty_count = 3;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    check_marks_clear();
    // The same token in two specs' lists is fine.
    specs[0].penalty_count = 2;
    specs[1].penalty_offset = 2;
    specs[1].penalty_count = 1;
    CHECK_NOTHROW(check_sample_batch(batch(), 2, capacity, marks.data()));
  }
  SECTION("values outside validate()'s ranges") {
    specs[1].temperature = kNaN;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[1].temperature = 1.0f;
    specs[1].uniform = 1.0f;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[1].uniform = 0.0f;
    specs[1].top_p = 0.0f;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[1].top_p = 1.0f;
    specs[1].min_p = 1.5f;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
    specs[1].min_p = 0.0f;
    specs[1].repetition_penalty = 0.0f;
    CHECK_THROWS_AS(check_sample_batch(batch(), 2, capacity, marks.data()), std::invalid_argument);
  }
  SECTION("null arrays with entries") {
    const RaggedSampleBatch broken{specs.data(), 2, nullptr, nullptr, 3, nullptr, 0};
    CHECK_THROWS_AS(check_sample_batch(broken, 2, capacity, marks.data()), std::invalid_argument);
  }
}

// -- on the device ------------------------------------------------------------------

TEST_CASE("device greedy sampling matches the host Sampler") {
  CAFLM_REQUIRE_GPU();
  for (const std::uint32_t vocab : {1000u, 32000u, 151936u}) {
    constexpr std::uint32_t kRows = 12;
    const std::vector<float> logits = random_logits(kRows, vocab, 3.0f, vocab);
    std::mt19937 rng(vocab + 1);
    std::vector<HostRequest> requests(kRows);
    HostBatch batch;
    for (std::uint32_t i = 0; i < kRows; ++i) {
      HostRequest& request = requests[i];
      request.params.temperature = i % 3 == 0 ? 0.0f : 1e-7f;
      request.params.top_logprobs = std::vector<std::uint32_t>{0, 1, 5, 20}[i % 4];
      request.params.penalty_last_n = -1;
      if (i % 2 == 1) {
        request.params.repetition_penalty = 1.5f;
        request.params.presence_penalty = 0.7f;
        request.params.frequency_penalty = 0.2f;
        request.history = random_history(vocab, 40, rng);
        // The raw argmax among the penalized tokens, so the penalty matters.
        const float* row = logits.data() + std::size_t{i} * vocab;
        request.history.push_back(static_cast<TokenId>(std::max_element(row, row + vocab) - row));
      }
      if (i % 4 == 2) {
        const float* row = logits.data() + std::size_t{i} * vocab;
        request.banned = {static_cast<TokenId>(std::max_element(row, row + vocab) - row), 3,
                          vocab + 5};
      }
      // Rows sampled in reverse, so spec i is not row i.
      batch.add(kRows - 1 - i, request);
    }
    DeviceSampler sampler(vocab, kRows, 4096, 64);
    const std::vector<Sampled> device = sample_on_device(sampler, logits, kRows, batch);
    Sampler host(vocab);
    for (std::uint32_t i = 0; i < kRows; ++i) {
      const HostAnswer answer =
          sample_on_host(host, logits.data() + std::size_t{kRows - 1 - i} * vocab, requests[i]);
      check_matches(device[i], answer,
                    "vocab " + std::to_string(vocab) + ", spec " + std::to_string(i));
    }
  }
}

TEST_CASE("device draws match the host Sampler's for the same uniform") {
  CAFLM_REQUIRE_GPU();
  const std::vector<SamplingParams> mixes = stochastic_mixes();
  // (vocab, calls of kSpecs draws): a few thousand draws in all, fewer on the
  // largest vocabulary where the host reference is slow.
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> plans = {
      {1000, 24}, {32000, 16}, {151936, 4}};
  constexpr std::uint32_t kRows = 16;
  constexpr std::uint32_t kSpecs = 64;
  std::size_t draws = 0;
  std::size_t distinct_tokens_seen = 0;
  for (const auto& [vocab, calls] : plans) {
    const std::vector<float> logits = random_logits(kRows, vocab, 2.0f, 7 * vocab);
    DeviceSampler sampler(vocab, kSpecs, 64 * kSpecs, 4 * kSpecs);
    Sampler host(vocab);
    std::mt19937 rng(vocab);
    std::uniform_int_distribution<std::uint32_t> pick_row(0, kRows - 1);
    for (std::uint32_t call = 0; call < calls; ++call) {
      std::vector<HostRequest> requests(kSpecs);
      std::vector<std::uint32_t> items(kSpecs);
      HostBatch batch;
      for (std::uint32_t i = 0; i < kSpecs; ++i) {
        HostRequest& request = requests[i];
        request.params = mixes[(call * kSpecs + i) % mixes.size()];
        request.params.seed = 1000003u * vocab + call;
        request.step = i;
        request.params.top_logprobs = i % 7 == 0 ? 3 : 0;
        if (request.params.repetition_penalty != 1.0f || request.params.presence_penalty != 0.0f ||
            request.params.frequency_penalty != 0.0f)
          request.history = random_history(vocab, 48, rng);
        if (i % 5 == 0)
          request.banned = {random_token(rng, vocab), random_token(rng, vocab)};
        items[i] = pick_row(rng);
        batch.add(items[i], request);
      }
      const std::vector<Sampled> device = sample_on_device(sampler, logits, kRows, batch);
      std::map<TokenId, int> tokens;
      for (std::uint32_t i = 0; i < kSpecs; ++i) {
        const HostAnswer answer =
            sample_on_host(host, logits.data() + std::size_t{items[i]} * vocab, requests[i]);
        check_matches(device[i], answer,
                      "vocab " + std::to_string(vocab) + ", call " + std::to_string(call) +
                          ", spec " + std::to_string(i) + " (mix " +
                          std::to_string((call * kSpecs + i) % mixes.size()) + ", u " +
                          std::to_string(batch.specs[i].uniform) + ")");
        ++tokens[device[i].result.token];
        ++draws;
      }
      distinct_tokens_seen += tokens.size();
    }
  }
  CHECK(draws >= 2000);
  // The draws really spread: far more than one token per call.
  CHECK(distinct_tokens_seen > draws / 8);
}

TEST_CASE("device sampling handles the smallest and the largest vocabulary") {
  CAFLM_REQUIRE_GPU();
  const std::vector<SamplingParams> mixes = stochastic_mixes();
  for (const std::uint32_t vocab : {2u, 3u, 262144u}) {
    constexpr std::uint32_t kRows = 4;
    const std::vector<float> logits = random_logits(kRows, vocab, 1.0f, 51 + vocab);
    std::mt19937 rng(vocab);
    std::vector<HostRequest> requests;
    HostBatch batch;
    for (std::size_t m = 0; m <= mixes.size(); ++m) {
      HostRequest request;
      request.params = m < mixes.size() ? mixes[m] : SamplingParams{};
      if (m == mixes.size())
        request.params.temperature = 0.0f;
      request.params.seed = 3;
      request.params.top_logprobs = 20; // more than a tiny vocabulary has
      request.step = m;
      request.history = {random_token(rng, vocab), random_token(rng, vocab)};
      if (request.history[0] == request.history[1])
        request.history.pop_back();
      if (m % 3 == 1)
        request.banned = {random_token(rng, vocab)};
      batch.add(static_cast<std::uint32_t>(m % kRows), request);
      requests.push_back(request);
    }
    DeviceSampler sampler(vocab, static_cast<std::uint32_t>(requests.size()), 64, 16);
    const std::vector<Sampled> device = sample_on_device(sampler, logits, kRows, batch);
    Sampler host(vocab);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      CHECK(device[i].result.top_count == std::min<std::uint32_t>(20, vocab));
      check_matches(device[i],
                    sample_on_host(host, logits.data() + std::size_t{batch.specs[i].item} * vocab,
                                   requests[i]),
                    "vocab " + std::to_string(vocab) + ", spec " + std::to_string(i));
    }
  }
}

TEST_CASE("device sampling counts NaN logits and never chooses one") {
  CAFLM_REQUIRE_GPU();
  constexpr std::uint32_t kVocab = 5000;
  constexpr std::uint32_t kRows = 6;
  std::vector<float> logits = random_logits(kRows, kVocab, 2.0f, 11);
  std::mt19937 rng(12);
  std::vector<std::uint32_t> nan_counts(kRows, 0);
  for (std::uint32_t row = 0; row < kRows; ++row) {
    float* values = logits.data() + std::size_t{row} * kVocab;
    // The row's largest logits become NaN first, so a NaN treated as a
    // number would win.
    std::vector<TokenId> order(kVocab);
    for (TokenId id = 0; id < kVocab; ++id)
      order[id] = id;
    std::sort(order.begin(), order.end(),
              [&](TokenId a, TokenId b) { return values[a] > values[b]; });
    const std::uint32_t nans = row == kRows - 1 ? kVocab - 3 : 10 + 100 * row;
    for (std::uint32_t i = 0; i < nans; ++i)
      values[order[i]] = kNaN;
    // Scattered NaN too, except in the last row, which keeps three numbers.
    for (std::uint32_t i = 0; row + 1 < kRows && i < 50; ++i) {
      const TokenId id = random_token(rng, kVocab);
      nan_counts[row] += std::isnan(values[id]) ? 0 : 1;
      values[id] = kNaN;
    }
    nan_counts[row] += nans;
  }
  std::vector<HostRequest> requests;
  HostBatch batch;
  for (std::uint32_t row = 0; row < kRows; ++row) {
    for (const float temperature : {0.0f, 1.0f, 0.6f}) {
      HostRequest request;
      request.params.temperature = temperature;
      request.params.top_p = temperature == 0.6f ? 0.8f : 1.0f;
      request.params.seed = 99;
      request.params.top_logprobs = 5;
      request.step = requests.size();
      batch.add(row, request);
      requests.push_back(request);
    }
  }
  DeviceSampler sampler(kVocab, static_cast<std::uint32_t>(requests.size()), 16, 16);
  const std::vector<Sampled> device = sample_on_device(sampler, logits, kRows, batch);
  Sampler host(kVocab);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::uint32_t row = batch.specs[i].item;
    const float* values = logits.data() + std::size_t{row} * kVocab;
    INFO("spec " << i << ", row " << row);
    CHECK(device[i].result.nan_logits == nan_counts[row]);
    CHECK_FALSE(std::isnan(values[device[i].result.token]));
    CHECK(std::isfinite(device[i].result.logprob));
    check_matches(device[i], sample_on_host(host, values, requests[i]), "NaN row");
  }
}

TEST_CASE("device sampling takes an infinite logit as the argmax") {
  CAFLM_REQUIRE_GPU();
  constexpr std::uint32_t kVocab = 3000;
  std::vector<float> logits = random_logits(3, kVocab, 2.0f, 21);
  // Row 0: two +inf, the lower id wins. Row 1: +inf banned, so a finite
  // distribution is drawn from. Row 2: every logit -inf but one NaN: the
  // lowest allowed id.
  logits[1700] = kInfinity;
  logits[2900] = kInfinity;
  logits[kVocab + 42] = kInfinity;
  std::fill(logits.begin() + 2 * kVocab, logits.end(), -kInfinity);
  logits[2 * kVocab + 5] = kNaN;
  std::vector<HostRequest> requests;
  HostBatch batch;
  for (std::uint32_t row = 0; row < 3; ++row) {
    for (const float temperature : {0.0f, 1.0f}) {
      HostRequest request;
      request.params.temperature = temperature;
      request.params.seed = 5;
      request.params.top_k = 20;
      request.params.top_logprobs = 4;
      request.step = requests.size();
      if (row == 1)
        request.banned = {42};
      if (row == 2)
        request.banned = {0, 1};
      batch.add(row, request);
      requests.push_back(request);
    }
  }
  DeviceSampler sampler(kVocab, 8, 8, 8);
  const std::vector<Sampled> device = sample_on_device(sampler, logits, 3, batch);
  Sampler host(kVocab);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::uint32_t row = batch.specs[i].item;
    const HostAnswer answer =
        sample_on_host(host, logits.data() + std::size_t{row} * kVocab, requests[i]);
    check_matches(device[i], answer, "spec " + std::to_string(i));
    // The logprobs themselves are NaN for an infinite row (inf - inf), on
    // both sides; the tokens are what matters.
    CHECK(same_float(device[i].result.logprob, answer.result.logprob));
  }
  CHECK(device[0].result.token == 1700);
  CHECK(device[1].result.token == 1700);
  CHECK(device[2].result.token != 42);
  CHECK(device[4].result.token == 2);
  CHECK(device[5].result.token == 2);
  CHECK(device[4].result.nan_logits == 1);
}

TEST_CASE("device sampling with all but one token banned picks that token") {
  CAFLM_REQUIRE_GPU();
  constexpr std::uint32_t kVocab = 1000;
  const std::vector<float> logits = random_logits(1, kVocab, 2.0f, 31);
  std::vector<HostRequest> requests;
  HostBatch batch;
  for (const float temperature : {0.0f, 1.0f, 3.0f}) {
    HostRequest request;
    request.params.temperature = temperature;
    request.params.seed = 8;
    request.params.top_p = 0.5f;
    request.step = requests.size();
    for (TokenId id = 0; id < kVocab; ++id) {
      if (id != 777)
        request.banned.push_back(id);
    }
    batch.add(0, request);
    requests.push_back(request);
  }
  DeviceSampler sampler(kVocab, 4, 0, 3 * kVocab);
  const std::vector<Sampled> device = sample_on_device(sampler, logits, 1, batch);
  Sampler host(kVocab);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CHECK(device[i].result.token == 777);
    check_matches(device[i], sample_on_host(host, logits.data(), requests[i]),
                  "spec " + std::to_string(i));
  }

  // One more ban leaves nothing: refused before the device is touched.
  HostRequest nothing_left = requests[0];
  nothing_left.banned.push_back(777);
  HostBatch refused;
  refused.add(0, nothing_left);
  CHECK_THROWS_AS(sample_on_device(sampler, logits, 1, refused), std::invalid_argument);
}

TEST_CASE("device sampling is batch invariant and deterministic") {
  CAFLM_REQUIRE_GPU();
  constexpr std::uint32_t kVocab = 32000;
  constexpr std::uint32_t kOthers = 64;
  constexpr std::uint32_t kRows = kOthers + 1;
  const std::vector<float> logits = random_logits(kRows, kVocab, 2.5f, 41);
  const std::vector<SamplingParams> mixes = stochastic_mixes();
  std::mt19937 rng(42);
  // The probe samples row 50; alone it is spec 0 of a one-row call.
  constexpr std::uint32_t kProbeRow = 50;
  constexpr std::uint32_t kProbeIndex = 37;
  const std::vector<float> probe_logits(logits.begin() + std::size_t{kProbeRow} * kVocab,
                                        logits.begin() + std::size_t{kProbeRow + 1} * kVocab);
  DeviceSampler sampler(kVocab, kRows, 64 * kRows, 4 * kRows);
  for (std::size_t m = 0; m <= mixes.size(); ++m) {
    HostRequest probe;
    probe.params = m < mixes.size() ? mixes[m] : SamplingParams{};
    if (m == mixes.size())
      probe.params.temperature = 0.0f; // and one greedy probe
    probe.params.seed = 77;
    probe.params.top_logprobs = 20;
    probe.step = m;
    probe.history = random_history(kVocab, 32, rng);
    probe.banned = {random_token(rng, kVocab)};

    HostBatch alone;
    alone.add(0, probe);
    HostBatch crowd;
    for (std::uint32_t i = 0; i < kRows; ++i) {
      if (i == kProbeIndex) {
        crowd.add(kProbeRow, probe);
        continue;
      }
      HostRequest other;
      other.params = mixes[(i + m) % mixes.size()];
      other.params.seed = i;
      other.params.top_logprobs = i % 21;
      other.history = random_history(kVocab, 16, rng);
      other.banned = {random_token(rng, kVocab), random_token(rng, kVocab)};
      crowd.add(random_token(rng, kRows), other);
    }
    const std::vector<Sampled> by_itself = sample_on_device(sampler, probe_logits, 1, alone);
    const std::vector<Sampled> among_others = sample_on_device(sampler, logits, kRows, crowd);
    const std::vector<Sampled> again = sample_on_device(sampler, logits, kRows, crowd);
    INFO("mix " << m);
    CHECK(bitwise_equal(by_itself[0], among_others[kProbeIndex]));
    for (std::uint32_t i = 0; i < kRows; ++i)
      CHECK(bitwise_equal(among_others[i], again[i]));
  }
}
