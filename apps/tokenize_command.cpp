#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "apps/commands.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm::apps {

namespace {

struct TokenizeOptions {
  std::string model;
  std::optional<std::string> text;
  std::string file;
  bool no_bos = false;
  bool json = false;
};

/// All of `in`, as bytes.
std::string read_all(std::istream& in, const std::string& name) {
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    throw std::runtime_error("cannot read " + name);
  return text;
}

/// The text to tokenize: the argument, the file, or standard input (no
/// argument, or --file -).
std::string input_text(const TokenizeOptions& options) {
  if (options.text && !options.file.empty())
    throw std::invalid_argument("give the text or --file, not both");
  if (options.text)
    return *options.text;
  if (options.file.empty() || options.file == "-")
    return read_all(std::cin, "standard input");
  if (std::filesystem::is_directory(options.file))
    throw std::invalid_argument("--file " + options.file + " is a directory");
  std::ifstream in(options.file, std::ios::binary);
  if (!in)
    throw std::invalid_argument("cannot read --file " + options.file + ": " + std::strerror(errno));
  return read_all(in, options.file);
}

void run_tokenize(const TokenizeOptions& options) {
  const std::string text = input_text(options);
  // Only the vocabulary is needed: vocabulary-only GGUF files work too.
  auto vocabulary =
      std::make_shared<const Vocabulary>(Vocabulary::from_gguf(GgufFile::open(options.model)));
  Tokenizer tokenizer(vocabulary);
  auto tokens = tokenizer.encode(text, !options.no_bos);
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
  cmd->add_option("text", options->text,
                  "The text (put -- before it if it starts with a dash; none: standard input)");
  cmd->add_option("--file", options->file, "Read the text from this file ('-': standard input)");
  cmd->callback([options] { run_tokenize(*options); });
}

} // namespace caflm::apps
