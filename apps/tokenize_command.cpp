#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/commands.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm::apps {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_bos = false;
  bool json = false;
};

void run_tokenize(const TokenizeOptions& options) {
  // Only the vocabulary is needed: vocabulary-only GGUF files work too.
  auto vocabulary =
      std::make_shared<const Vocabulary>(Vocabulary::from_gguf(GgufFile::open(options.model)));
  Tokenizer tokenizer(vocabulary);
  auto tokens = tokenizer.encode(options.text, !options.no_bos);
  if (options.json) {
    std::printf("%s\n", nlohmann::json{{"tokens", tokens}}.dump().c_str());
    return;
  }
  for (std::size_t i = 0; i < tokens.size(); ++i)
    std::printf("%s%u", i ? " " : "", tokens[i]);
  std::printf("\n");
}

} // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("--model", options->model, "GGUF model or vocabulary file")->required();
  cmd->add_flag("--no-bos", options->no_bos, "Do not add the beginning-of-sequence token");
  cmd->add_flag("--json", options->json, "Print {\"tokens\":[...]}");
  cmd->add_option("text", options->text, "The text (put -- before it if it starts with a dash)")
      ->required();
  cmd->callback([options] { run_tokenize(*options); });
}

} // namespace caflm::apps
