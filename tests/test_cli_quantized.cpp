// Quantized models as a user meets them: written by `caflm make-test-model`
// (each type, and llama.cpp's Q4_K_M mixture), run by `caflm generate`, and
// the greedy tokens checked against a plain reference forward pass.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "caflm/model/model.hpp"
#include "tests/support/cli_harness.hpp"
#include "tests/support/reference_model.hpp"

using namespace caflm::testing;

namespace {

std::size_t argmax(const std::vector<float>& row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

/// The largest logit minus the second largest, over the row's RMS.
float relative_margin(const std::vector<float>& row) {
  std::vector<float> sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  double squares = 0.0;
  for (float v : row)
    squares += double(v) * v;
  return static_cast<float>((sorted[0] - sorted[1]) / std::sqrt(squares / row.size()));
}

/// Runs `caflm generate` greedily on `model` and checks every generated token
/// against the reference pass fed the same sequence, wherever the reference's
/// choice is clear by more than `clear` of the row's RMS (the runner and the
/// reference differ by up to 7.5% of it on quantized weights: rounding of
/// activations to 8 bits flips one quant here and there).
void check_generate_matches_reference(const std::string& model, float clear) {
  const Run run = run_caflm({"generate", "--model", model, "--prompt",
                             "The quick brown fox jumps over the lazy dog", "--temperature", "0",
                             "--ignore-eos", "--max-tokens", "12", "--json"});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const nlohmann::json out = nlohmann::json::parse(run.out);
  const auto prompt = out["prompt_tokens"].get<std::vector<caflm::TokenId>>();
  const auto generated = out["tokens"].get<std::vector<caflm::TokenId>>();
  REQUIRE(generated.size() == 12);

  std::vector<caflm::TokenId> sequence = prompt;
  sequence.insert(sequence.end(), generated.begin(), generated.end() - 1);
  const auto loaded = caflm::Model::load(model);
  const auto logits = ReferenceModel(*loaded).logits(sequence);
  std::size_t compared = 0;
  for (std::size_t i = 0; i < generated.size(); ++i) {
    const std::vector<float>& row = logits[prompt.size() - 1 + i];
    if (relative_margin(row) <= clear)
      continue;
    ++compared;
    INFO("generated token " << i);
    CHECK(generated[i] == argmax(row));
  }
  CHECK(compared >= generated.size() / 4);
}

} // namespace

TEST_CASE("every quantized type runs through caflm generate as the reference pass does") {
  const std::string type = GENERATE("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k",
                                    "q5_k", "q6_k", "f16", "bf16");
  INFO(type);
  TempDir dir;
  const std::string model = (dir / (type + ".gguf")).string();
  const Run made = run_caflm({"make-test-model", "--out", model, "--arch", "llama", "--dim", "256",
                              "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
                              "--type", type, "--seed", "3"});
  INFO(describe(made));
  REQUIRE(made.exit_code == 0);
  check_generate_matches_reference(model, 0.15f);
}

TEST_CASE("a Q4_K_M mixture with rows that are not whole super-blocks runs as the reference") {
  // 576 wide, as SmolLM2: Q6_K falls back to Q8_0 and Q4_K to Q5_0 there.
  const std::string arch = GENERATE("llama", "qwen2", "qwen3", "phi3");
  INFO(arch);
  TempDir dir;
  const std::string model = (dir / "q4_k_m.gguf").string();
  const Run made = run_caflm({"make-test-model",
                              "--out",
                              model,
                              "--arch",
                              arch,
                              "--dim",
                              "576",
                              "--layers",
                              "3",
                              "--heads",
                              "9",
                              "--kv-heads",
                              "3",
                              "--ffn",
                              "768",
                              "--mix",
                              "q4_k_m",
                              "--tied",
                              "--seed",
                              "5"});
  INFO(describe(made));
  REQUIRE(made.exit_code == 0);
  // The mixture is in the file: inspect lists each tensor's type.
  const Run inspected = run_caflm({"inspect", model, "--json"});
  REQUIRE(inspected.exit_code == 0);
  const nlohmann::json tensors = nlohmann::json::parse(inspected.out)["tensors"];
  std::vector<std::string> types;
  for (const auto& tensor : tensors)
    types.push_back(tensor["type"]);
  CHECK(std::count(types.begin(), types.end(), "q8_0") >= 1); // the tied embedding, as output
  CHECK(std::count(types.begin(), types.end(), "q5_0") >= 1); // Q4_K rows of 576
  check_generate_matches_reference(model, 0.15f);
}
