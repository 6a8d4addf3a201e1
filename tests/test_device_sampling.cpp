// The engine's side of sampling on a backend's device (RaggedBackend::sample):
// what it sends per row (the Sampler's parameters, the draw's uniform number,
// the penalty window's distinct tokens and counts, the bans) must give the
// tokens the host sampler gives, however the rows are split over calls, and a
// failed sample call ends every request as a failed step does. The "device"
// here is the CPU runner with the host Sampler behind the ABI, so this runs
// everywhere; the GPU's own sampler is checked against the host Sampler in
// tests/cuda/.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "caflm/cpu/cpu_model_runner.hpp"
#include "caflm/engine/engine_options.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"
#include "support/model_harness.hpp"

using namespace caflm;

namespace {

/// The CPU runner, sampling "on its device" from the ABI's specs alone.
class SpecSamplingBackend : public RaggedBackend {
 public:
  SpecSamplingBackend(std::shared_ptr<const Model> model, RunnerLimits limits,
                      RaggedSampleCapacity capacity)
    : runner_(std::move(model), limits)
    , capacity_(capacity)
    , logits_(std::size_t{limits.max_items} * runner_.vocab_size())
    , sampler_(runner_.vocab_size()) {}

  std::uint32_t vocab_size() const override { return runner_.vocab_size(); }
  bool samples_on_device() const override { return true; }
  RaggedSampleCapacity sample_capacity() const override { return capacity_; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    // The engine keeps the logits "on the device" when it samples there.
    CHECK(logits == nullptr);
    return runner_.execute(batch, outputs, logits_.data());
  }

  Expected<std::uint32_t, BackendError> sample(const RaggedSampleBatch& batch,
                                               RaggedSampleResult* results,
                                               RaggedTopLogprob* top_logprobs) override {
    ++calls;
    if (fail_next_sample) {
      fail_next_sample = false;
      return BackendError::DeviceFailure;
    }
    REQUIRE(batch.spec_count <= capacity_.max_specs);
    REQUIRE(batch.penalty_size <= capacity_.max_penalty_entries);
    REQUIRE(batch.banned_size <= capacity_.max_banned);
    for (std::uint32_t s = 0; s < batch.spec_count; ++s) {
      const RaggedSampleSpec& spec = batch.specs[s];
      SamplingParams params;
      params.temperature = spec.temperature;
      params.top_k = spec.top_k;
      params.top_p = spec.top_p;
      params.min_p = spec.min_p;
      params.repetition_penalty = spec.repetition_penalty;
      params.presence_penalty = spec.presence_penalty;
      params.frequency_penalty = spec.frequency_penalty;
      params.top_logprobs = spec.top_logprobs;
      // The window as the device sees it: each distinct token, count times.
      params.penalty_last_n = -1;
      std::vector<TokenId> history;
      for (std::uint32_t p = 0; p < spec.penalty_count; ++p)
        history.insert(history.end(), batch.penalty_counts[spec.penalty_offset + p],
                       batch.penalty_tokens[spec.penalty_offset + p]);
      std::vector<TokenLogprob> top(kMaxSampleTopLogprobs);
      const SampleResult r = sampler_.sample_with_uniform(
          logits_.data() + std::size_t{spec.item} * vocab_size(), params, history.data(),
          history.size(), spec.uniform, batch.banned + spec.banned_offset, spec.banned_count,
          top.data());
      results[s] = RaggedSampleResult{r.token, r.logprob, r.nan_logits,
                                      std::min(spec.top_logprobs, vocab_size())};
      for (std::uint32_t t = 0; t < results[s].top_count; ++t)
        top_logprobs[std::size_t{s} * kMaxSampleTopLogprobs + t] =
            RaggedTopLogprob{top[t].token, top[t].logprob};
    }
    return batch.spec_count;
  }

  int calls = 0;
  bool fail_next_sample = false;

 private:
  CpuModelRunner runner_;
  RaggedSampleCapacity capacity_;
  std::vector<float> logits_; // [max_items, vocab]
  Sampler sampler_;
};

EngineConfig small_config() {
  EngineConfig config;
  config.scheduler.max_requests = 12;
  config.scheduler.max_running = 12;
  config.scheduler.max_context = 128;
  config.scheduler.block_size = 8;
  config.scheduler.token_budget = 40;
  config.kv_blocks = 300;
  return config;
}

RunnerLimits limits_of(const EngineConfig& config) {
  RunnerLimits limits;
  limits.max_tokens = config.scheduler.token_budget;
  limits.max_items = config.scheduler.max_requests;
  limits.max_context = config.scheduler.max_context;
  limits.kv_blocks = config.kv_blocks;
  limits.block_size = config.scheduler.block_size;
  return limits;
}

/// Every mix of what a row sends: greedy and drawn, each filter, penalties
/// over short and whole windows, bans, top logprobs.
std::vector<GenerationRequest> mixed_requests(std::uint32_t vocab) {
  std::vector<GenerationRequest> requests;
  std::mt19937 rng(90);
  for (std::uint64_t id = 0; id < 10; ++id) {
    GenerationRequest r;
    r.id = id;
    r.prompt = caflm::testing::random_tokens(rng, 5 + 7 * id, vocab);
    SamplingParams& p = r.params;
    p.max_tokens = 20;
    p.seed = 1000 + id;
    p.temperature = id % 3 == 0 ? 0.0f : 0.7f + 0.1f * float(id % 4);
    p.top_k = id % 4 == 1 ? 12 : 0;
    p.top_p = id % 5 == 2 ? 0.8f : 1.0f;
    p.min_p = id % 5 == 3 ? 0.05f : 0.0f;
    p.repetition_penalty = id % 2 == 0 ? 1.3f : 1.0f;
    p.presence_penalty = id % 3 == 1 ? 0.4f : 0.0f;
    p.frequency_penalty = id % 3 == 2 ? 0.6f : 0.0f;
    p.penalty_last_n = id % 4 == 0 ? -1 : 6;
    p.ignore_eos = id % 2 == 1;
    p.top_logprobs = id % 3 == 0 ? 5 : 0;
    requests.push_back(std::move(r));
  }
  return requests;
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  FinishReason finish = FinishReason::None;
};

std::map<std::uint64_t, Outcome> run(InferenceEngine& engine,
                                     const std::vector<GenerationRequest>& requests) {
  for (const GenerationRequest& r : requests)
    REQUIRE_FALSE(engine.add(r));
  std::map<std::uint64_t, Outcome> outcomes;
  for (int steps = 0; engine.has_work() && steps < 1000; ++steps)
    for (const TokenEvent& e : engine.step()) {
      // Every event of a request that does not fail carries a token.
      Outcome& o = outcomes[e.request_id];
      o.tokens.push_back(e.token);
      o.logprobs.push_back(e.logprob);
      o.top.push_back(e.top_logprobs);
      if (e.finish != FinishReason::None)
        o.finish = e.finish;
    }
  return outcomes;
}

} // namespace

TEST_CASE("rows sampled from the ABI's specs give the host sampler's tokens, however split") {
  auto model = caflm::testing::random_model(caflm::testing::small_random_spec("llama", 41));
  auto tokenizer = load_tokenizer(*model);
  const EngineConfig config = small_config();
  const auto requests = mixed_requests(model->config().vocab_size);

  InferenceEngine host(tokenizer, std::make_unique<CpuModelRunner>(model, limits_of(config)),
                       config, model->cache_salt());
  const auto expected = run(host, requests);

  // Roomy: one call per step. Tight: a few rows and a short penalty list
  // per call, so the engine splits every step's rows over several calls.
  for (const RaggedSampleCapacity capacity :
       {RaggedSampleCapacity{12, 4096, 1024}, RaggedSampleCapacity{3, 140, 16}}) {
    INFO("capacity: " << capacity.max_specs << " specs, " << capacity.max_penalty_entries
                      << " penalty entries");
    auto backend = std::make_unique<SpecSamplingBackend>(model, limits_of(config), capacity);
    SpecSamplingBackend* device = backend.get();
    InferenceEngine engine(tokenizer, std::move(backend), config, model->cache_salt());
    const auto got = run(engine, requests);
    REQUIRE(got.size() == expected.size());
    for (const auto& [id, want] : expected) {
      INFO("request " << id);
      const Outcome& have = got.at(id);
      CHECK(have.tokens == want.tokens);
      CHECK(have.logprobs == want.logprobs);
      CHECK(have.finish == want.finish);
      REQUIRE(have.top.size() == want.top.size());
      for (std::size_t t = 0; t < want.top.size(); ++t) {
        REQUIRE(have.top[t].size() == want.top[t].size());
        for (std::size_t k = 0; k < want.top[t].size(); ++k) {
          CHECK(have.top[t][k].token == want.top[t][k].token);
          CHECK(have.top[t][k].logprob == want.top[t][k].logprob);
        }
      }
    }
    if (capacity.max_specs == 3)
      CHECK(device->calls > 20 * 10 / 3); // every step took several calls
  }
}

TEST_CASE("a failed sample call ends every request as a failed step, to be served elsewhere") {
  auto model = caflm::testing::random_model(caflm::testing::small_random_spec("llama", 42));
  auto tokenizer = load_tokenizer(*model);
  const EngineConfig config = small_config();
  auto backend = std::make_unique<SpecSamplingBackend>(model, limits_of(config),
                                                       RaggedSampleCapacity{12, 4096, 1024});
  SpecSamplingBackend* device = backend.get();
  InferenceEngine engine(tokenizer, std::move(backend), config, model->cache_salt());
  const auto requests = mixed_requests(model->config().vocab_size);
  for (const GenerationRequest& r : requests)
    REQUIRE_FALSE(engine.add(r));
  // Prefill until tokens flow, then fail one sample call.
  while (engine.step().empty()) {
  }
  device->fail_next_sample = true;
  const std::vector<TokenEvent> events = engine.step();
  std::size_t failed = 0;
  for (const TokenEvent& e : events) {
    CHECK(e.finish == FinishReason::Error);
    CHECK(e.fault == EngineFault::StepFailed);
    CHECK(e.error.find("sampling failed") != std::string::npos);
    ++failed;
  }
  CHECK(failed == requests.size());
  CHECK_FALSE(engine.has_work());
}

TEST_CASE("--device and --gpu-memory values are parsed or refused with a reason") {
  CHECK(parse_device("auto") == Device::Auto);
  CHECK(parse_device("cpu") == Device::Cpu);
  CHECK(parse_device("cuda") == Device::Cuda);
  CHECK_FALSE(parse_device("gpu"));
  CHECK_FALSE(parse_device("CUDA"));

  const GpuMemory fraction = parse_gpu_memory("0.5");
  CHECK(fraction.budget(std::uint64_t{80} << 30) == std::uint64_t{40} << 30);
  CHECK(parse_gpu_memory("1").budget(1000) == 1000);
  const GpuMemory mib = parse_gpu_memory("4096");
  CHECK(mib.budget(std::uint64_t{80} << 30) == std::uint64_t{4096} << 20);
  for (const char* bad : {"0", "-0.5", "1.5", "abc", "", "12MB", "nan", "inf"})
    CHECK_THROWS_AS(parse_gpu_memory(bad), std::invalid_argument);
}
