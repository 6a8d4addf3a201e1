#include "caflm/model/quant_mix.hpp"

#include <cctype>
#include <stdexcept>
#include <string>

namespace caflm {

std::optional<QuantMix> quant_mix_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "uniform")
    return QuantMix::Uniform;
  if (lower == "q4_k_m")
    return QuantMix::Q4_K_M;
  return std::nullopt;
}

const char* to_string(QuantMix mix) {
  switch (mix) {
  case QuantMix::Uniform:
    return "uniform";
  case QuantMix::Q4_K_M:
    return "q4_k_m";
  }
  return "?";
}

bool use_more_bits(std::uint32_t layer, std::uint32_t n_layers) {
  // Signed, as llama.cpp computes it: (i - n/8) is only reached for i >= n/8.
  const auto i = static_cast<std::int64_t>(layer);
  const auto n = static_cast<std::int64_t>(n_layers);
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

TensorType fallback_type(TensorType type, std::uint64_t cols) {
  if (cols % tensor_block_size(type) == 0)
    return type;
  TensorType fallback;
  switch (type) {
  case TensorType::Q2_K:
  case TensorType::Q3_K:
    fallback = TensorType::Q4_0;
    break;
  case TensorType::Q4_K:
    fallback = TensorType::Q5_0;
    break;
  case TensorType::Q5_K:
    fallback = TensorType::Q5_1;
    break;
  case TensorType::Q6_K:
    fallback = TensorType::Q8_0;
    break;
  default:
    throw std::invalid_argument("rows of " + std::to_string(cols) + " values are not whole " +
                                to_string(type) + " blocks of " +
                                std::to_string(tensor_block_size(type)) +
                                ", and llama.cpp defines no fallback type for " + to_string(type));
  }
  // Rows not even a multiple of 32: llama.cpp keeps such a tensor in F16.
  return cols % tensor_block_size(fallback) == 0 ? fallback : TensorType::F16;
}

namespace {

/// llama_tensor_get_type_impl for LLAMA_FTYPE_MOSTLY_Q4_K_M on a dense
/// (not mixture-of-experts, not Falcon, not 70B) model, before the fallback.
TensorType q4_k_m_type(TensorType base, const WeightPlace& p) {
  switch (p.role) {
  case WeightRole::Output:
    // The output, and a tied embedding that doubles as it: Q6_K, or Q8_0 when
    // the rows are not whole blocks of the base type.
    return p.cols % tensor_block_size(base) != 0 ? TensorType::Q8_0 : TensorType::Q6_K;
  case WeightRole::TokenEmbedding:
    if (p.tied_embeddings)
      return p.cols % tensor_block_size(base) != 0 ? TensorType::Q8_0 : TensorType::Q6_K;
    return base;
  case WeightRole::AttnV:
  case WeightRole::AttnQkv:
    // Current llama.cpp treats a fused QKV like attn_v (category_is_attn_v);
    // releases before that gave it Q5_K.
    return use_more_bits(p.layer, p.n_layers) ? TensorType::Q6_K : base;
  case WeightRole::FfnDown:
    return use_more_bits(p.layer, p.n_layers) ? TensorType::Q6_K : base;
  case WeightRole::AttnQ:
  case WeightRole::AttnK:
  case WeightRole::AttnOutput:
  case WeightRole::FfnGate:
  case WeightRole::FfnUp:
    return base;
  }
  return base;
}

} // namespace

TensorType quant_mix_type(QuantMix mix, TensorType uniform_type, const WeightPlace& place) {
  // Float types are never mixed and never need a fallback (blocks of one).
  if (uniform_type == TensorType::F32 || uniform_type == TensorType::F16 ||
      uniform_type == TensorType::BF16)
    return uniform_type;
  TensorType type = uniform_type;
  if (mix == QuantMix::Q4_K_M)
    type = q4_k_m_type(uniform_type, place);
  return fallback_type(type, place.cols);
}

} // namespace caflm
