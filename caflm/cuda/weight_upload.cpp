#include "caflm/cuda/weight_upload.hpp"

#include <limits>
#include <stdexcept>

#include "caflm/model/model_weights.hpp"

namespace caflm::cuda {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a > kMax - b)
    throw std::invalid_argument(std::string(what) + ": size overflows 64 bits");
  return a + b;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a != 0 && b > kMax / a)
    throw std::invalid_argument(std::string(what) + ": size overflows 64 bits");
  return a * b;
}

class PlanBuilder {
 public:
  explicit PlanBuilder(std::uint64_t alignment) { plan_.alignment = alignment; }

  void matrix(std::string name, const WeightView& view) {
    for (const WeightUpload& earlier : plan_.tensors) {
      if (earlier.matrix && !earlier.alias && earlier.host_data == view.data &&
          earlier.type == view.type && earlier.rows == view.rows && earlier.cols == view.cols) {
        WeightUpload same = earlier;
        same.name = std::move(name);
        same.alias = true;
        plan_.tensors.push_back(std::move(same));
        return;
      }
    }
    const std::uint64_t bytes =
        checked_mul(view.rows, tensor_row_bytes(view.type, view.cols), "plan_weight_upload");
    plan_.matrix_bytes = checked_add(plan_.matrix_bytes, bytes, "plan_weight_upload");
    place(std::move(name), view.data, bytes, view.type, view.rows, view.cols, true);
  }

  void vector(std::string name, const std::vector<float>& values) {
    if (values.empty())
      return; // an optional tensor the model does not have
    const std::uint64_t bytes = checked_mul(values.size(), sizeof(float), "plan_weight_upload");
    plan_.vector_bytes = checked_add(plan_.vector_bytes, bytes, "plan_weight_upload");
    place(std::move(name), values.data(), bytes, TensorType::F32, 1, values.size(), false);
  }

  WeightUploadPlan finish() {
    plan_.total_bytes = align_up(end_);
    return std::move(plan_);
  }

 private:
  std::uint64_t align_up(std::uint64_t offset) const {
    return checked_add(offset, plan_.alignment - 1, "plan_weight_upload") & ~(plan_.alignment - 1);
  }

  void place(std::string name, const void* data, std::uint64_t bytes, TensorType type,
             std::uint64_t rows, std::uint64_t cols, bool matrix) {
    const std::uint64_t offset = align_up(end_);
    end_ = checked_add(offset, bytes, "plan_weight_upload");
    plan_.tensors.push_back(
        WeightUpload{std::move(name), data, offset, bytes, type, rows, cols, matrix, false});
  }

  WeightUploadPlan plan_;
  std::uint64_t end_ = 0;
};

} // namespace

const WeightUpload* WeightUploadPlan::find(std::string_view name) const {
  for (const WeightUpload& t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

WeightUploadPlan plan_weight_upload(const ModelWeights& weights, std::uint64_t alignment) {
  if (alignment < 16 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("plan_weight_upload: alignment " + std::to_string(alignment) +
                                " is not a power of two of at least 16");
  PlanBuilder b(alignment);
  b.matrix("token_embd", weights.token_embedding);
  b.vector("output_norm", weights.output_norm);
  b.matrix("output", weights.output);
  b.vector("rope_freqs", weights.rope_freq_factors);
  b.vector("rope_factors_long", weights.rope_factors_long);
  b.vector("rope_factors_short", weights.rope_factors_short);
  for (std::size_t i = 0; i < weights.layers.size(); ++i) {
    const LayerWeights& l = weights.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    b.vector(p + "attn_norm", l.attn_norm);
    b.matrix(p + "attn_q", l.wq);
    b.matrix(p + "attn_k", l.wk);
    b.matrix(p + "attn_v", l.wv);
    b.matrix(p + "attn_output", l.wo);
    b.vector(p + "attn_q.bias", l.bq);
    b.vector(p + "attn_k.bias", l.bk);
    b.vector(p + "attn_v.bias", l.bv);
    b.vector(p + "attn_output.bias", l.bo);
    b.vector(p + "attn_q_norm", l.q_norm);
    b.vector(p + "attn_k_norm", l.k_norm);
    b.vector(p + "ffn_norm", l.ffn_norm);
    b.matrix(p + "ffn_gate", l.w_gate);
    b.matrix(p + "ffn_up", l.w_up);
    b.matrix(p + "ffn_down", l.w_down);
    b.vector(p + "ffn_gate.bias", l.b_gate);
    b.vector(p + "ffn_up.bias", l.b_up);
    b.vector(p + "ffn_down.bias", l.b_down);
  }
  return b.finish();
}

std::uint64_t kv_block_bytes(std::uint64_t n_layers, std::uint64_t n_kv_heads,
                             std::uint64_t head_dim, std::uint64_t block_size,
                             std::uint64_t bytes_per_element) {
  if (n_layers == 0 || n_kv_heads == 0 || head_dim == 0 || block_size == 0 ||
      bytes_per_element == 0)
    throw std::invalid_argument("kv_block_bytes: every factor must be positive");
  std::uint64_t bytes = 2; // K and V
  for (std::uint64_t factor : {n_layers, n_kv_heads, head_dim, block_size, bytes_per_element})
    bytes = checked_mul(bytes, factor, "kv_block_bytes");
  return bytes;
}

std::uint64_t kv_blocks_within_budget(std::uint64_t budget_bytes, std::uint64_t weight_bytes,
                                      std::uint64_t workspace_bytes,
                                      std::uint64_t bytes_per_block) {
  if (bytes_per_block == 0)
    throw std::invalid_argument("kv_blocks_within_budget: bytes per block must be positive");
  if (weight_bytes > budget_bytes || workspace_bytes > budget_bytes - weight_bytes)
    return 0;
  return (budget_bytes - weight_bytes - workspace_bytes) / bytes_per_block;
}

} // namespace caflm::cuda
