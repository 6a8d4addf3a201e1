#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/text/chat_template.hpp"

namespace caflm::apps {

namespace {

struct TemplateOptions {
  std::string model;
  std::string messages;
  std::string chat_template;
  bool no_generation_prompt = false;
};

/// A JSON value as a template value; objects keep their key order.
jinja::Value to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
  case nlohmann::ordered_json::value_t::null:
    return jinja::Value::none();
  case nlohmann::ordered_json::value_t::boolean:
    return jinja::Value(j.get<bool>());
  case nlohmann::ordered_json::value_t::number_integer:
  case nlohmann::ordered_json::value_t::number_unsigned:
    return jinja::Value(j.get<int64_t>());
  case nlohmann::ordered_json::value_t::number_float:
    return jinja::Value(j.get<double>());
  case nlohmann::ordered_json::value_t::string:
    return jinja::Value(j.get<std::string>());
  case nlohmann::ordered_json::value_t::array: {
    jinja::Value::List items;
    for (const auto& item : j)
      items.push_back(to_value(item));
    return jinja::Value::list(std::move(items));
  }
  case nlohmann::ordered_json::value_t::object: {
    jinja::Value::Dict items;
    for (const auto& [key, value] : j.items())
      items.emplace_back(key, to_value(value));
    return jinja::Value::dict(std::move(items));
  }
  default:
    throw std::invalid_argument("--messages holds a JSON value of an unsupported type");
  }
}

std::string read_messages_file(const std::string& path) {
  if (path == "-")
    return std::string{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::invalid_argument("cannot read --messages " + path + ": " + std::strerror(errno));
  return std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void run_template(const TemplateOptions& options) {
  nlohmann::ordered_json input;
  try {
    input = nlohmann::ordered_json::parse(read_messages_file(options.messages));
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument("--messages " + options.messages + " is not JSON: " + e.what());
  }
  // Either the message list itself, or {"messages": [...], "tools": [...],
  // ...} whose other keys become template variables (tools, enable_thinking).
  nlohmann::ordered_json messages = input;
  jinja::Value::Dict extra;
  if (input.is_object()) {
    if (!input.contains("messages"))
      throw std::invalid_argument("--messages " + options.messages +
                                  ": expected [{\"role\": ..., \"content\": ...}, ...]");
    messages = input["messages"];
    for (const auto& [key, value] : input.items())
      if (key != "messages")
        extra.emplace_back(key, to_value(value));
  }
  if (!messages.is_array())
    throw std::invalid_argument("--messages " + options.messages +
                                ": expected [{\"role\": ..., \"content\": ...}, ...]");
  for (const auto& message : messages)
    if (!message.is_object() || !message.contains("role"))
      throw std::invalid_argument("--messages " + options.messages +
                                  ": every message needs a \"role\"");

  GgufFile file = GgufFile::open(options.model);
  ChatTemplate chat_template = options.chat_template.empty()
                                   ? ChatTemplate::from_gguf(file)
                                   : ChatTemplate::builtin(options.chat_template, file);
  std::string prompt =
      chat_template.render_values(to_value(messages), !options.no_generation_prompt, extra);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout); // exactly the prompt, no newline added
}

} // namespace

void add_template_command(CLI::App& app) {
  auto options = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "template", "Print a conversation as the model's chat template renders it");
  cmd->add_option("--model", options->model, "GGUF model or vocabulary file")->required();
  cmd->add_option("--messages", options->messages,
                  "JSON file: [{\"role\": ..., \"content\": ...}, ...] ('-': standard input)")
      ->required();
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "Do not open the assistant's turn at the end");
  add_chat_template_option(*cmd, options->chat_template);
  cmd->callback([options] { run_template(*options); });
}

} // namespace caflm::apps
