#include <cstdio>
#include <stdexcept>
#include <string>

#include "apps/commands.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/model/random_model.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm::apps {

namespace {

struct MakeTestModelOptions {
  RandomModelSpec spec;
  std::string out;
  std::string vocabulary_path;
  std::string type;
  std::string mix = "uniform";
  std::string rope_scaling = "none";
};

std::string weight_type_names() {
  std::string names;
  for (TensorType type : kWeightTypes)
    names += std::string(names.empty() ? "" : ", ") + to_string(type);
  return names;
}

void run_make_test_model(MakeTestModelOptions& options) {
  RandomModelSpec& spec = options.spec;
  auto mix = quant_mix_from_name(options.mix);
  if (!mix)
    throw std::invalid_argument("--mix must be uniform or q4_k_m, not '" + options.mix + "'");
  spec.mix = *mix;
  if (spec.mix == QuantMix::Q4_K_M && !options.type.empty())
    throw std::invalid_argument("--mix q4_k_m chooses each matrix's type; give no --type");
  const std::string type_name = options.type.empty() ? "f32" : options.type;
  auto type = tensor_type_from_name(type_name);
  if (!type)
    throw std::invalid_argument("--type must be one of " + weight_type_names() + ", not '" +
                                type_name + "'");
  spec.type = *type;
  auto scaling = random_rope_scaling_from_name(options.rope_scaling);
  if (!scaling)
    throw std::invalid_argument("--rope-scaling must be none, linear, llama3 or longrope, not '" +
                                options.rope_scaling + "'");
  spec.rope_scaling = *scaling;
  // The model loader refuses a zero context: fail here, before writing a file.
  if (spec.context_length == 0)
    throw std::invalid_argument("--context must be at least 1");
  const GgufFile tokenizer = options.vocabulary_path.empty()
                                 ? GgufFile::from_bytes(Vocabulary::byte_level_bpe().to_gguf())
                                 : GgufFile::open(options.vocabulary_path);
  // The file is built in memory, twice over at its end.
  const auto tokens = tokenizer.get_string_array("tokenizer.ggml.tokens");
  const std::uint64_t bytes = random_model_bytes(spec, tokens ? tokens->size() : 0);
  check_available_memory(2.0 * double(bytes), "this model's tensors and file image");
  write_random_model(spec, tokenizer, options.out);
  std::fprintf(stderr, "wrote %s\n", options.out.c_str());
}

} // namespace

void add_make_test_model_command(CLI::App& app) {
  auto options = std::make_shared<MakeTestModelOptions>();
  RandomModelSpec& spec = options->spec;
  CLI::App* cmd =
      app.add_subcommand("make-test-model", "Write a random-weight GGUF model of any shape");
  cmd->add_option("--out", options->out, "Output file")->required();
  cmd->add_option("--vocab", options->vocabulary_path,
                  "GGUF file whose tokenizer to copy (default: a small byte-level BPE)");
  cmd->add_option("--arch", spec.architecture, "llama, qwen2, qwen3 or phi3")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "phi3"}))
      ->required();
  cmd->add_option("--dim", spec.dim, "Embedding length")->required();
  cmd->add_option("--layers", spec.n_layers, "Transformer blocks")->required();
  cmd->add_option("--heads", spec.n_heads, "Query heads")->required();
  cmd->add_option("--kv-heads", spec.n_kv_heads, "Key/value heads")->required();
  cmd->add_option("--head-dim", spec.head_dim,
                  "Dimensions per head, when not dim / heads (written as key_length)");
  cmd->add_option("--ffn", spec.ffn_dim, "Feed-forward length")->required();
  cmd->add_option("--type", options->type,
                  "Type of every matrix (default f32): " + weight_type_names() +
                      "; rows that are not whole blocks fall back as llama-quantize does");
  cmd->add_option("--mix", options->mix,
                  "uniform (one --type) or q4_k_m (llama-quantize's Q4_K_M mixture)")
      ->capture_default_str();
  cmd->add_option("--context", spec.context_length, "Context length")->capture_default_str();
  cmd->add_flag("--tied", spec.tied_embeddings, "Tie the output projection to the embeddings");
  cmd->add_option("--rope-base", spec.rope_base,
                  "RoPE base (default: 10000; 500000 with llama3 scaling; 1e6 for qwen)");
  cmd->add_option("--rope-scaling", options->rope_scaling,
                  "none, linear (rope.scaling.factor), llama3 (rope_freqs tensor, llama) or "
                  "longrope (rope_factors_long/short and attn_factor, phi3)")
      ->capture_default_str();
  cmd->add_option("--rope-scaling-factor", spec.rope_scaling_factor,
                  "linear: the position divisor; llama3: the low-frequency divisor; longrope: "
                  "the largest long factor")
      ->capture_default_str();
  cmd->add_option("--original-context", spec.original_context_length,
                  "llama3/longrope: the context first trained for (default 8192 for llama3, "
                  "context / 32 for longrope)");
  cmd->add_option("--seed", spec.seed, "Random seed")->required();
  cmd->callback([options] { run_make_test_model(*options); });
}

} // namespace caflm::apps
