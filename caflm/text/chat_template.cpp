#include "caflm/text/chat_template.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "caflm/gguf/gguf.hpp"
#include "caflm/text/chat_template_builtins.hpp"

namespace caflm {

namespace {

/// Other names people use for the built-in templates.
constexpr std::pair<std::string_view, std::string_view> aliases[] = {
    {"qwen2", "qwen2.5"}, {"qwen", "qwen2.5"},     {"llama3.3", "llama3.1"},
    {"phi3.5", "phi3"},   {"tinyllama", "zephyr"}, {"mistral", "mistral-v3"},
    {"gemma2", "gemma"},  {"smollm", "smollm2"}};

std::string options_text() {
  std::string text;
  for (const std::string& name : ChatTemplate::builtin_names())
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string use_instead() {
  return "; use --chat-template NAME with one of: " + options_text();
}

jinja::Template parse_template(const std::string& source, const std::string& name) {
  try {
    return jinja::Template(source);
  } catch (const jinja::TemplateError& e) {
    throw std::invalid_argument("cannot parse the " + name + " chat template: " + e.what() +
                                use_instead());
  }
}

/// The text of the token whose id `key` holds, or "".
std::string token_text(const GgufFile& file, std::string_view key) {
  auto id = file.get_uint(key);
  if (!id)
    return {};
  auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || *id >= tokens->size())
    return {};
  return std::string((*tokens)[*id]);
}

/// The built-in template a vocabulary's special tokens point to, or "".
std::string guess_from_tokens(const GgufFile& file) {
  auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens)
    return {};
  auto has = [&](std::string_view text) {
    return std::find(tokens->begin(), tokens->end(), text) != tokens->end();
  };
  if (has("<|im_start|>"))
    return "chatml";
  if (has("<|start_header_id|>"))
    return has("<|eom_id|>") ? "llama3.1" : "llama3";
  if (has("<start_of_turn>"))
    return "gemma";
  if (has("<|user|>") && has("<|end|>"))
    return "phi3";
  if (has("<｜User｜>"))
    return "deepseek-r1";
  if (has("[SYSTEM_PROMPT]"))
    return "mistral-v7";
  if (has("[AVAILABLE_TOOLS]"))
    return "mistral-v3";
  return {};
}

} // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token,
                           std::string name)
  : source_(std::move(source))
  , bos_token_(std::move(bos_token))
  , eos_token_(std::move(eos_token))
  , name_(std::move(name))
  , template_(parse_template(source_, name_)) {}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  std::string bos = token_text(file, "tokenizer.ggml.bos_token_id");
  std::string eos = token_text(file, "tokenizer.ggml.eos_token_id");
  if (auto source = file.get_string("tokenizer.chat_template"))
    return ChatTemplate(std::string(*source), std::move(bos), std::move(eos), "model's");
  std::string guess = guess_from_tokens(file);
  if (guess.empty())
    throw std::invalid_argument("the model has no tokenizer.chat_template and its vocabulary "
                                "names no known chat format" +
                                use_instead());
  return builtin(guess, std::move(bos), std::move(eos));
}

ChatTemplate ChatTemplate::builtin(std::string_view name, std::string bos_token,
                                   std::string eos_token) {
  for (const auto& [alias, target] : aliases)
    if (name == alias)
      name = target;
  auto source = builtin_source(name);
  if (!source)
    throw std::invalid_argument("unknown chat template '" + std::string(name) +
                                "'; known: " + options_text());
  return ChatTemplate(std::string(*source), std::move(bos_token), std::move(eos_token),
                      std::string(name));
}

ChatTemplate ChatTemplate::builtin(std::string_view name, const GgufFile& file) {
  return builtin(name, token_text(file, "tokenizer.ggml.bos_token_id"),
                 token_text(file, "tokenizer.ggml.eos_token_id"));
}

std::vector<std::string> ChatTemplate::builtin_names() {
  std::vector<std::string> names;
  for (const BuiltinChatTemplate& t : builtin_chat_templates())
    names.emplace_back(t.name);
  return names;
}

std::optional<std::string_view> ChatTemplate::builtin_source(std::string_view name) {
  for (const BuiltinChatTemplate& t : builtin_chat_templates())
    if (t.name == name)
      return t.source;
  return std::nullopt;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  jinja::Value::List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages)
    list.push_back(
        jinja::Value::dict({{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}}));
  return render_values(jinja::Value::list(std::move(list)), add_generation_prompt);
}

std::string ChatTemplate::render_values(const jinja::Value& messages, bool add_generation_prompt,
                                        const jinja::Value::Dict& extra) const {
  // apply_chat_template passes tools and documents, None when not given.
  jinja::Value::Dict variables = {
      {"messages", messages},
      {"tools", jinja::Value::none()},
      {"documents", jinja::Value::none()},
      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
      {"bos_token", jinja::Value(bos_token_)},
      {"eos_token", jinja::Value(eos_token_)},
  };
  if (fixed_time_) {
    std::time_t time = *fixed_time_;
    variables.emplace_back(
        "strftime_now", jinja::Value::function("strftime_now", [time](jinja::CallArgs& args) {
          if (args.positional.empty() || !args.positional[0].is_string())
            throw jinja::TemplateError("strftime_now() needs a format string");
          std::tm local{};
          localtime_r(&time, &local);
          char buf[256];
          std::size_t n =
              std::strftime(buf, sizeof buf, args.positional[0].as_string().c_str(), &local);
          return jinja::Value(std::string(buf, n));
        }));
  }
  variables.insert(variables.end(), extra.begin(), extra.end());
  try {
    return template_.render(variables);
  } catch (const jinja::RaisedException& e) {
    throw std::runtime_error(std::string("the chat template refused the messages: ") + e.what());
  } catch (const jinja::TemplateError& e) {
    throw std::runtime_error("cannot render the " + name_ + " chat template: " + e.what() +
                             use_instead());
  }
}

} // namespace caflm
