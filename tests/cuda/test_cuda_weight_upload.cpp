// The host-side plan of the GPU weight arena and the KV-cache sizing: plain
// C++, runs without a device.

#include "caflm/cuda/weight_upload.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "caflm/gguf/gguf.hpp"
#include "caflm/model/model.hpp"
#include "caflm/model/random_model.hpp"
#include "caflm/text/vocabulary.hpp"

using namespace caflm;
using namespace caflm::cuda;

namespace {

std::shared_ptr<const Model> load_random_model(const RandomModelSpec& spec) {
  static const GgufFile vocabulary = GgufFile::from_bytes(Vocabulary::byte_level_bpe().to_gguf());
  const auto path = std::filesystem::temp_directory_path() /
                    ("caflm-test-upload-" + std::to_string(::getpid()) + "-" + spec.architecture +
                     "-" + to_string(spec.type) + ".gguf");
  write_random_model(spec, vocabulary, path.string());
  auto model = Model::load(path.string());
  std::filesystem::remove(path); // the mapping stays valid
  return model;
}

RandomModelSpec spec_of(const std::string& architecture, TensorType type, bool tied) {
  RandomModelSpec spec;
  spec.architecture = architecture;
  spec.dim = 256; // whole K-quant blocks
  spec.n_layers = 2;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.context_length = 256;
  spec.type = type;
  spec.tied_embeddings = tied;
  spec.seed = 7;
  return spec;
}

/// Checks what every plan must satisfy, and that copying each tensor to its
/// offset in an arena image reproduces every tensor's bytes (so no two
/// overlap).
void check_plan(const WeightUploadPlan& plan) {
  std::uint64_t matrix_bytes = 0;
  std::uint64_t vector_bytes = 0;
  std::uint64_t end = 0;
  for (const WeightUpload& t : plan.tensors) {
    INFO(t.name);
    CHECK(t.device_offset % plan.alignment == 0);
    CHECK(t.host_data != nullptr);
    if (t.matrix) {
      CHECK(t.bytes == t.rows * tensor_row_bytes(t.type, t.cols));
    } else {
      CHECK(t.type == TensorType::F32);
      CHECK(t.rows == 1);
      CHECK(t.bytes == t.cols * sizeof(float));
    }
    if (t.alias)
      continue;
    (t.matrix ? matrix_bytes : vector_bytes) += t.bytes;
    end = std::max(end, t.device_offset + t.bytes);
  }
  CHECK(plan.matrix_bytes == matrix_bytes);
  CHECK(plan.vector_bytes == vector_bytes);
  CHECK(plan.total_bytes >= end);
  CHECK(plan.total_bytes < end + plan.alignment);
  CHECK(plan.total_bytes % plan.alignment == 0);

  std::vector<std::uint8_t> arena(plan.total_bytes, 0);
  for (const WeightUpload& t : plan.tensors)
    if (!t.alias)
      std::memcpy(arena.data() + t.device_offset, t.host_data, t.bytes);
  for (const WeightUpload& t : plan.tensors) {
    INFO(t.name);
    CHECK(std::memcmp(arena.data() + t.device_offset, t.host_data, t.bytes) == 0);
  }
}

} // namespace

TEST_CASE("the upload plan places every tensor of a llama model, matrices in their GGUF bytes") {
  const auto type = GENERATE(TensorType::F32, TensorType::Q8_0, TensorType::Q4_K);
  INFO(to_string(type));
  const auto model = load_random_model(spec_of("llama", type, false));
  const ModelWeights& w = model->weights();
  const WeightUploadPlan plan = plan_weight_upload(w);
  check_plan(plan);
  // token_embd, output_norm, output, then 9 tensors per layer (no biases).
  CHECK(plan.tensors.size() == 3 + 9 * w.layers.size());

  const WeightUpload* q = plan.find("blk.1.attn_q");
  REQUIRE(q != nullptr);
  CHECK(q->matrix);
  CHECK_FALSE(q->alias);
  CHECK(q->host_data == w.layers[1].wq.data);
  CHECK(q->type == w.layers[1].wq.type);
  CHECK(q->rows == w.layers[1].wq.rows);
  CHECK(q->cols == w.layers[1].wq.cols);

  const WeightUpload* norm = plan.find("blk.0.ffn_norm");
  REQUIRE(norm != nullptr);
  CHECK_FALSE(norm->matrix);
  CHECK(norm->host_data == w.layers[0].ffn_norm.data());
  CHECK(norm->cols == w.layers[0].ffn_norm.size());

  CHECK(plan.find("blk.0.attn_q.bias") == nullptr);
  CHECK(plan.find("blk.2.attn_q") == nullptr);
  CHECK(plan.find("no such tensor") == nullptr);
}

TEST_CASE("tied embeddings are uploaded once and the output projection shares their bytes") {
  const auto model = load_random_model(spec_of("llama", TensorType::Q8_0, true));
  const WeightUploadPlan plan = plan_weight_upload(model->weights());
  check_plan(plan);
  const WeightUpload* embd = plan.find("token_embd");
  const WeightUpload* output = plan.find("output");
  REQUIRE(embd != nullptr);
  REQUIRE(output != nullptr);
  CHECK_FALSE(embd->alias);
  CHECK(output->alias);
  CHECK(output->device_offset == embd->device_offset);
  CHECK(output->bytes == embd->bytes);

  // The same model untied needs the projection's bytes more.
  const auto untied = load_random_model(spec_of("llama", TensorType::Q8_0, false));
  const WeightUploadPlan untied_plan = plan_weight_upload(untied->weights());
  CHECK(untied_plan.matrix_bytes == plan.matrix_bytes + untied_plan.find("output")->bytes);
}

TEST_CASE("biases and q/k norms get entries where the architecture has them") {
  const auto qwen2 = load_random_model(spec_of("qwen2", TensorType::Q4_0, false));
  const WeightUploadPlan qwen2_plan = plan_weight_upload(qwen2->weights());
  check_plan(qwen2_plan);
  for (const char* name : {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.1.attn_v.bias"}) {
    INFO(name);
    const WeightUpload* bias = qwen2_plan.find(name);
    REQUIRE(bias != nullptr);
    CHECK_FALSE(bias->matrix);
  }
  CHECK(qwen2_plan.find("blk.0.attn_q.bias")->cols == qwen2->weights().layers[0].bq.size());

  const auto qwen3 = load_random_model(spec_of("qwen3", TensorType::Q6_K, false));
  const WeightUploadPlan qwen3_plan = plan_weight_upload(qwen3->weights());
  check_plan(qwen3_plan);
  REQUIRE(qwen3_plan.find("blk.1.attn_k_norm") != nullptr);
  CHECK(qwen3_plan.find("blk.1.attn_k_norm")->cols == qwen3->weights().layers[1].k_norm.size());

  // phi3's fused attn_qkv and gate/up are bound as row ranges: each range is
  // its own entry, together exactly the fused tensors' bytes.
  const auto phi3 = load_random_model(spec_of("phi3", TensorType::Q5_K, false));
  const WeightUploadPlan phi3_plan = plan_weight_upload(phi3->weights());
  check_plan(phi3_plan);
  const LayerWeights& l = phi3->weights().layers[0];
  CHECK(phi3_plan.find("blk.0.attn_k")->host_data == l.wk.data);
  CHECK(phi3_plan.find("blk.0.ffn_up")->host_data == l.w_up.data);
}

TEST_CASE("the arena alignment is a power of two of at least 16") {
  const auto model = load_random_model(spec_of("llama", TensorType::F16, false));
  for (std::uint64_t alignment : {16, 64, 4096}) {
    const WeightUploadPlan plan = plan_weight_upload(model->weights(), alignment);
    CHECK(plan.alignment == alignment);
    check_plan(plan);
  }
  CHECK_THROWS_AS(plan_weight_upload(model->weights(), 8), std::invalid_argument);
  CHECK_THROWS_AS(plan_weight_upload(model->weights(), 48), std::invalid_argument);
  // A larger alignment never needs fewer bytes.
  CHECK(plan_weight_upload(model->weights(), 4096).total_bytes >=
        plan_weight_upload(model->weights(), 16).total_bytes);
}

TEST_CASE("a KV block holds K and V for every layer, KV head and token") {
  CHECK(kv_block_bytes(2, 2, 16, 16, 4) == 2u * 2 * 2 * 16 * 16 * 4);
  CHECK(kv_block_bytes(32, 8, 128, 16, 2) == 2u * 32 * 8 * 128 * 16 * 2);
  CHECK_THROWS_AS(kv_block_bytes(0, 2, 16, 16, 4), std::invalid_argument);
  CHECK_THROWS_AS(kv_block_bytes(2, 2, 16, 0, 4), std::invalid_argument);
  const std::uint64_t big = std::uint64_t{1} << 20;
  CHECK_THROWS_AS(kv_block_bytes(big, big, big, big, 4), std::invalid_argument);
}

TEST_CASE("the KV cache gets the blocks that fit after the weights and the workspace") {
  CHECK(kv_blocks_within_budget(1000, 300, 100, 64) == 9); // 600 / 64
  CHECK(kv_blocks_within_budget(1000, 296, 0, 64) == 11);  // 704 = 11 * 64 exactly
  CHECK(kv_blocks_within_budget(1000, 297, 0, 64) == 10);  // one byte short of 11
  CHECK(kv_blocks_within_budget(1000, 1000, 0, 64) == 0);  // weights take everything
  CHECK(kv_blocks_within_budget(1000, 1001, 0, 64) == 0);  // weights alone do not fit
  CHECK(kv_blocks_within_budget(1000, 500, 501, 64) == 0); // nor weights and workspace
  CHECK(kv_blocks_within_budget(1000, 0, std::numeric_limits<std::uint64_t>::max(), 1) == 0);
  CHECK_THROWS_AS(kv_blocks_within_budget(1000, 0, 0, 0), std::invalid_argument);

  // For random sizes the blocks fit and one more would not.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t budget = rng() % (std::uint64_t{1} << 40);
    const std::uint64_t weights = rng() % (budget + 1);
    const std::uint64_t workspace = rng() % (budget - weights + 1);
    const std::uint64_t per_block = 1 + rng() % (std::uint64_t{1} << 24);
    const std::uint64_t blocks = kv_blocks_within_budget(budget, weights, workspace, per_block);
    INFO(budget << " " << weights << " " << workspace << " " << per_block);
    CHECK(weights + workspace + blocks * per_block <= budget);
    CHECK(weights + workspace + (blocks + 1) * per_block > budget);
  }
}

TEST_CASE("a real budget: weights of the plan first, then the KV cache") {
  const auto model = load_random_model(spec_of("llama", TensorType::Q4_K, false));
  const ModelConfig& config = model->config();
  const WeightUploadPlan plan = plan_weight_upload(model->weights());
  const std::uint64_t per_block =
      kv_block_bytes(config.n_layers, config.n_kv_heads, config.head_dim, 16, sizeof(float));
  const std::uint64_t workspace = 1 << 20;
  const std::uint64_t budget = plan.total_bytes + workspace + 100 * per_block + per_block / 2;
  CHECK(kv_blocks_within_budget(budget, plan.total_bytes, workspace, per_block) == 100);
}
