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
  std::string type = "f32";
};

void run_make_test_model(MakeTestModelOptions& options) {
  auto type = tensor_type_from_name(options.type);
  if (!type)
    throw std::invalid_argument("--type must be f32, f16, bf16 or q8_0, not '" + options.type +
                                "'");
  options.spec.type = *type;
  // The model loader refuses a zero context: fail here, before writing a file.
  if (options.spec.context_length == 0)
    throw std::invalid_argument("--context must be at least 1");
  const GgufFile tokenizer = options.vocabulary_path.empty()
                                 ? GgufFile::from_bytes(Vocabulary::byte_level_bpe().to_gguf())
                                 : GgufFile::open(options.vocabulary_path);
  // The file is built in memory, twice over at its end.
  const auto tokens = tokenizer.get_string_array("tokenizer.ggml.tokens");
  const std::uint64_t bytes = random_model_bytes(options.spec, tokens ? tokens->size() : 0);
  check_available_memory(2.0 * double(bytes), "this model's tensors and file image");
  write_random_model(options.spec, tokenizer, options.out);
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
  cmd->add_option("--arch", spec.architecture, "llama or qwen2")
      ->check(CLI::IsMember({"llama", "qwen2"}))
      ->required();
  cmd->add_option("--dim", spec.dim, "Embedding length")->required();
  cmd->add_option("--layers", spec.n_layers, "Transformer blocks")->required();
  cmd->add_option("--heads", spec.n_heads, "Query heads")->required();
  cmd->add_option("--kv-heads", spec.n_kv_heads, "Key/value heads")->required();
  cmd->add_option("--ffn", spec.ffn_dim, "Feed-forward length")->required();
  cmd->add_option("--type", options->type, "f32, f16, bf16 or q8_0")->required();
  cmd->add_option("--context", spec.context_length, "Context length")->capture_default_str();
  cmd->add_flag("--tied", spec.tied_embeddings, "Tie the output projection to the embeddings");
  cmd->add_option("--seed", spec.seed, "Random seed")->required();
  cmd->callback([options] { run_make_test_model(*options); });
}

} // namespace caflm::apps
