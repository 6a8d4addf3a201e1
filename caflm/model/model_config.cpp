#include "caflm/model/model_config.hpp"

#include <fmt/format.h>
#include <optional>

#include "caflm/gguf/gguf.hpp"

namespace caflm {

namespace {

std::uint32_t required_u32(const GgufFile& file, const std::string& key) {
  auto value = file.get_uint(key);
  if (!value)
    throw GgufError(fmt::format("model metadata lacks '{}'", key));
  if (*value == 0 || *value > UINT32_MAX)
    throw GgufError(fmt::format("model metadata '{}' = {} is out of range", key, *value));
  return static_cast<std::uint32_t>(*value);
}

/// What each architecture's forward pass differs in.
void set_architecture(ModelConfig& config) {
  const std::string& a = config.architecture;
  if (a == "llama") {
    config.arch = Architecture::Llama;
    config.rope_mode = RopeMode::Interleaved;
  } else if (a == "qwen2") {
    config.arch = Architecture::Qwen2;
    config.rope_mode = RopeMode::NeoX;
    config.qkv_bias = true;
  } else if (a == "qwen3") {
    config.arch = Architecture::Qwen3;
    config.rope_mode = RopeMode::NeoX;
    config.qk_norm = true;
  } else if (a == "phi3") {
    config.arch = Architecture::Phi3;
    config.rope_mode = RopeMode::NeoX;
  } else {
    throw GgufError(fmt::format("unsupported architecture '{}': caflm runs 'llama', 'qwen2', "
                                "'qwen3' and 'phi3' models",
                                a));
  }
}

/// RoPE scaling as llama.cpp's load_hparams and context setup read it.
void read_rope_scaling(const GgufFile& file, ModelConfig& config) {
  const std::string& a = config.architecture;
  const std::string type_key = a + ".rope.scaling.type";
  const std::string type = std::string(file.get_string(type_key).value_or("linear"));
  if (type == "none")
    config.rope_scaling = RopeScaling::None;
  else if (type == "linear")
    config.rope_scaling = RopeScaling::Linear;
  else if (type == "longrope")
    config.rope_scaling = RopeScaling::LongRope;
  else
    throw GgufError(fmt::format("unsupported RoPE scaling '{}' ('{}'): caflm runs 'none', "
                                "'linear' and 'longrope'",
                                type, type_key));

  // The factor divides positions; the older key name is still read.
  std::optional<double> factor = file.get_float(a + ".rope.scaling.factor");
  if (!factor || *factor == 0.0)
    factor = file.get_float(a + ".rope.scale_linear");
  if (factor && *factor != 0.0 && config.rope_scaling != RopeScaling::None) {
    if (!(*factor > 0.0))
      throw GgufError(fmt::format("RoPE scaling factor {} is not positive", *factor));
    config.rope_freq_scale = static_cast<float>(1.0 / *factor);
  }
  if (auto attn = file.get_float(a + ".rope.scaling.attn_factor")) {
    if (!(*attn > 0.0))
      throw GgufError(fmt::format("'{}.rope.scaling.attn_factor' = {} is not positive", a, *attn));
    config.rope_attn_factor = static_cast<float>(*attn);
  }
  const std::string original_key = a + ".rope.scaling.original_context_length";
  config.rope_original_context =
      file.has_key(original_key) ? required_u32(file, original_key) : config.context_length;
}

} // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  auto arch = file.get_string("general.architecture");
  if (!arch)
    throw GgufError("model metadata lacks 'general.architecture'");
  config.architecture = std::string(*arch);
  set_architecture(config);
  const std::string& a = config.architecture;
  config.dim = required_u32(file, a + ".embedding_length");
  config.n_layers = required_u32(file, a + ".block_count");
  config.n_heads = required_u32(file, a + ".attention.head_count");
  config.n_kv_heads = file.has_key(a + ".attention.head_count_kv")
                          ? required_u32(file, a + ".attention.head_count_kv")
                          : config.n_heads;
  config.ffn_dim = required_u32(file, a + ".feed_forward_length");
  config.context_length = required_u32(file, a + ".context_length");
  config.head_dim = file.has_key(a + ".attention.key_length")
                        ? required_u32(file, a + ".attention.key_length")
                        : config.dim / config.n_heads;
  if (auto eps = file.get_float(a + ".attention.layer_norm_rms_epsilon"))
    config.rms_eps = static_cast<float>(*eps);
  if (auto base = file.get_float(a + ".rope.freq_base"))
    config.rope_base = static_cast<float>(*base);
  read_rope_scaling(file, config);

  if (config.n_heads % config.n_kv_heads != 0)
    throw GgufError(fmt::format("{} query heads cannot be grouped over {} KV heads", config.n_heads,
                                config.n_kv_heads));
  if (config.head_dim == 0)
    throw GgufError(fmt::format("{} heads leave no dimensions of an embedding of {}",
                                config.n_heads, config.dim));
  if (config.head_dim % 2 != 0)
    throw GgufError(fmt::format("head dimension {} is odd; RoPE needs pairs", config.head_dim));
  if (auto value_length = file.get_uint(a + ".attention.value_length");
      value_length && *value_length != config.head_dim)
    throw GgufError(fmt::format("value heads of {} dimensions differ from key heads of {} "
                                "('{}.attention.value_length'); caflm needs them equal",
                                *value_length, config.head_dim, a));
  if (auto rope_dims = file.get_uint(a + ".rope.dimension_count");
      rope_dims && *rope_dims != config.head_dim)
    throw GgufError(fmt::format("partial RoPE ({} of {} dimensions, '{}.rope.dimension_count') is "
                                "not supported",
                                *rope_dims, config.head_dim, a));
  if (!(config.rms_eps > 0.0f) || !(config.rope_base > 0.0f))
    throw GgufError("RMS epsilon and RoPE base must be positive");

  const GgufTensorInfo* embeddings = file.find_tensor("token_embd.weight");
  if (embeddings == nullptr || embeddings->dims.size() != 2)
    throw GgufError("model lacks a two-dimensional 'token_embd.weight'");
  if (embeddings->dims[1] > UINT32_MAX)
    throw GgufError("vocabulary too large");
  config.vocab_size = static_cast<std::uint32_t>(embeddings->dims[1]);
  return config;
}

} // namespace caflm
