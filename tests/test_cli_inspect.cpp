// `caflm inspect`: the metadata, tensor table, parameter count and memory
// estimate it prints, checked against the file read independently.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "caflm/gguf/gguf.hpp"
#include "tests/support/cli_harness.hpp"

namespace fs = std::filesystem;
using namespace caflm::testing;

namespace {

const std::string kTestData = CAFLM_TESTDATA_DIR;
const std::string kTinyModel = kTestData + "/models/tiny-llama-f32.gguf";
const std::string kGpt2Vocab = kTestData + "/vocab/ggml-vocab-gpt-2.gguf";

nlohmann::json inspect_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"inspect", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Run run = run_caflm(args);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  return nlohmann::json::parse(run.out);
}

} // namespace

TEST_CASE("inspect --json lists every tensor with its type, shape and bytes") {
  const caflm::GgufFile file = caflm::GgufFile::open(kTinyModel);
  const nlohmann::json out = inspect_json({kTinyModel});
  REQUIRE(out["tensors"].size() == file.tensors().size());
  std::uint64_t parameters = 0;
  for (std::size_t i = 0; i < file.tensors().size(); ++i) {
    const caflm::GgufTensorInfo& tensor = file.tensors()[i];
    INFO(tensor.name);
    CHECK(out["tensors"][i]["name"] == tensor.name);
    CHECK(out["tensors"][i]["type"] == caflm::to_string(tensor.type));
    CHECK(out["tensors"][i]["shape"].get<std::vector<std::uint64_t>>() == tensor.dims);
    CHECK(out["tensors"][i]["bytes"] == tensor.n_bytes);
    parameters += tensor.n_elements;
  }
  CHECK(out["parameters"] == parameters);
  CHECK(out["metadata"]["general.architecture"]["value"] == "llama");
  CHECK(out["metadata"]["general.architecture"]["type"] == "string");
  // A vocabulary's tokens are counted, not all printed.
  const auto& tokens = out["metadata"]["tokenizer.ggml.tokens"];
  CHECK(tokens["length"] == file.get_string_array("tokenizer.ggml.tokens")->size());
  CHECK(tokens["value"].size() <= 8);
}

TEST_CASE("inspect sizes the KV cache by --context and counts weights once for --replicas") {
  const caflm::GgufFile file = caflm::GgufFile::open(kTinyModel);
  const std::uint64_t layers = *file.get_uint("llama.block_count");
  const std::uint64_t heads = *file.get_uint("llama.attention.head_count");
  const std::uint64_t kv_heads = file.get_uint("llama.attention.head_count_kv").value_or(heads);
  const std::uint64_t head_dim = *file.get_uint("llama.embedding_length") / heads;
  // K and V of every layer, as floats, in whole blocks of 16 tokens.
  const std::uint64_t per_token = 2 * layers * kv_heads * head_dim * 4;

  const nlohmann::json one = inspect_json({kTinyModel, "--context", "100"});
  const nlohmann::json three = inspect_json({kTinyModel, "--context", "100", "--replicas", "3"});
  INFO(one["memory"].dump());
  CHECK(one["memory"]["context"] == 100);
  CHECK(one["memory"]["kv_cache_bytes_per_replica"] == 112 * per_token);
  const std::uint64_t weights = one["memory"]["weight_bytes"];
  const std::uint64_t engine = one["memory"]["engine_bytes_per_replica"];
  CHECK(weights == one["tensor_bytes"].get<std::uint64_t>());
  CHECK(engine >= 112 * per_token);
  CHECK(one["memory"]["total_bytes"] == weights + engine);
  CHECK(three["memory"]["total_bytes"] == weights + 3 * engine);
}

TEST_CASE("inspect prints a readable table, and lists files it cannot run") {
  const Run run = run_caflm({"inspect", kTinyModel});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("token_embd.weight") != std::string::npos);
  CHECK(run.out.find("parameters: ") != std::string::npos);
  CHECK(run.out.find("memory for a context of") != std::string::npos);

  // A vocabulary holds no tensors: it lists, and says why there is no estimate.
  const nlohmann::json vocab = inspect_json({kGpt2Vocab});
  CHECK(vocab["tensors"].empty());
  CHECK(vocab["memory"].contains("error"));

  check_clean_failure(run_caflm({"inspect", "/nonexistent/model.gguf"}), "/nonexistent/model.gguf");
  check_clean_failure(run_caflm({"inspect", kTinyModel, "--replicas", "0"}), "--replicas");
}
