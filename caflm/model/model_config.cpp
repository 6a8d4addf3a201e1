#include "caflm/model/model_config.hpp"

#include <fmt/format.h>

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

} // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  auto arch = file.get_string("general.architecture");
  if (!arch)
    throw GgufError("model metadata lacks 'general.architecture'");
  config.architecture = std::string(*arch);
  if (config.architecture == "llama") {
    config.rope_mode = RopeMode::Interleaved;
  } else if (config.architecture == "qwen2") {
    config.rope_mode = RopeMode::NeoX;
    config.qkv_bias = true;
  } else {
    throw GgufError(
        fmt::format("unsupported architecture '{}': caflm runs 'llama' and 'qwen2' models",
                    config.architecture));
  }
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

  if (config.n_heads % config.n_kv_heads != 0)
    throw GgufError(fmt::format("{} query heads cannot be grouped over {} KV heads", config.n_heads,
                                config.n_kv_heads));
  if (config.head_dim % 2 != 0)
    throw GgufError(fmt::format("head dimension {} is odd; RoPE needs pairs", config.head_dim));
  if (auto rope_dims = file.get_uint(a + ".rope.dimension_count");
      rope_dims && *rope_dims != config.head_dim)
    throw GgufError(fmt::format("partial RoPE ({} of {} dimensions) is not supported", *rope_dims,
                                config.head_dim));
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
