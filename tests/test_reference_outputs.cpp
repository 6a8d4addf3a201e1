// The tiny F32 model's greedy generations and top-5 log-probabilities match
// llama.cpp's, by the rule in testdata/README.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

using namespace caflm;

namespace {

const std::string model_path = CAFLM_TESTDATA_DIR "/models/tiny-llama-f32.gguf";

nlohmann::json expected_cases() {
  std::ifstream in(CAFLM_TESTDATA_DIR "/models/tiny-llama-f32.expected.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in)["cases"];
}

} // namespace

TEST_CASE("prompts tokenize as llama.cpp tokenized them, with BOS") {
  auto model = Model::load(model_path);
  for (const auto& c : expected_cases()) {
    INFO(c["prompt"].get<std::string>());
    auto tokens = load_tokenizer(*model)->encode(c["prompt"].get<std::string>(), true);
    CHECK(tokens == c["prompt_tokens"].get<std::vector<TokenId>>());
  }
}

TEST_CASE("greedy generation matches llama.cpp's tokens and top-5 log-probabilities") {
  auto model = Model::load(model_path);
  EngineOptions sizing;
  sizing.kv_cache_bytes = std::size_t{64} << 20;
  auto engine = make_cpu_engine(model, cpu_engine_config(*model, sizing));
  auto cases = expected_cases();
  REQUIRE(cases.size() > 0);
  // All cases run together in one engine: batching must not change them.
  std::uint64_t id = 0;
  for (const auto& c : cases) {
    GenerationRequest request;
    request.id = id++;
    request.prompt = c["prompt_tokens"].get<std::vector<TokenId>>();
    request.params.temperature = 0.0f;
    request.params.ignore_eos = true;
    request.params.max_tokens = static_cast<std::uint32_t>(c["greedy_tokens"].size());
    request.params.top_logprobs = 5;
    REQUIRE_FALSE(engine->add(request));
  }
  std::vector<std::vector<TokenEvent>> streams(cases.size());
  while (engine->has_work())
    for (auto& event : engine->step())
      streams[event.request_id].push_back(std::move(event));

  int compared_steps = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    INFO("case " << i << ": " << c["prompt"].get<std::string>());
    const auto& stream = streams[i];
    REQUIRE(stream.size() == c["greedy_tokens"].size());
    CHECK(stream.back().finish == FinishReason::Length);
    for (std::size_t step = 0; step < stream.size(); ++step) {
      const auto& reference = c["top5_logprobs"][step];
      TokenId expected = c["greedy_tokens"][step];
      if (stream[step].token != expected) {
        // Acceptable only at a near-tie; stop comparing this case there.
        double margin = reference[0][1].get<double>() - reference[1][1].get<double>();
        INFO("step " << step << ": got " << stream[step].token << ", expected " << expected);
        CHECK(margin < 0.02);
        break;
      }
      REQUIRE(stream[step].top_logprobs.size() == 5);
      for (std::size_t k = 0; k < 5; ++k) {
        INFO("step " << step << " rank " << k);
        CHECK(stream[step].top_logprobs[k].token == reference[k][0].get<TokenId>());
        CHECK(std::abs(stream[step].top_logprobs[k].logprob - reference[k][1].get<double>()) <
              1e-3);
      }
      ++compared_steps;
    }
  }
  CHECK(compared_steps > 100);
}
