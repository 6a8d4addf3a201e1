#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "caflm/text/jinja_interpreter.hpp"
#include "caflm/text/jinja_value.hpp"

namespace caflm {

class GgufFile;

/// One turn of a conversation.
struct ChatMessage {
  std::string role; ///< "system", "user", "assistant", "tool", ...
  std::string content;
};

/// A model's chat template: Jinja source rendered by caflm's interpreter as
/// Hugging Face's `apply_chat_template` renders it (trim_blocks,
/// lstrip_blocks, `raise_exception`, `strftime_now`, `bos_token` and
/// `eos_token`, `tools` and `documents` None unless given), so the prompt
/// matches the model's own byte for byte.
class ChatTemplate {
 public:
  /// Parses `source`. Throws std::invalid_argument naming the position at
  /// fault and the built-in templates that could stand in.
  explicit ChatTemplate(std::string source, std::string bos_token = {}, std::string eos_token = {},
                        std::string name = "custom");

  /// The file's `tokenizer.chat_template`, with the texts of its BOS and EOS
  /// tokens. A file without a template gets the built-in one its special
  /// tokens point to (`<|im_start|>`: chatml, `<|start_header_id|>`: llama3,
  /// ...); when they point nowhere, std::invalid_argument names the options.
  static ChatTemplate from_gguf(const GgufFile& file);

  /// A built-in template by name (see builtin_names()), with the BOS and EOS
  /// token texts of `file` where given. Throws std::invalid_argument naming
  /// the options for an unknown name.
  static ChatTemplate builtin(std::string_view name, std::string bos_token = {},
                              std::string eos_token = {});
  static ChatTemplate builtin(std::string_view name, const GgufFile& file);

  /// The names builtin() accepts, in a stable order.
  static std::vector<std::string> builtin_names();

  /// The Jinja source of a built-in template, or nothing.
  static std::optional<std::string_view> builtin_source(std::string_view name);

  /// Renders `messages`; `add_generation_prompt` opens the assistant's turn.
  /// Throws std::runtime_error with the template's message where it calls
  /// `raise_exception` (roles out of order, say), and one naming the options
  /// where the template uses something caflm cannot render.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  /// Renders messages given as template values (dicts that may carry
  /// tool_calls and other fields); `extra` adds variables such as `tools` or
  /// `enable_thinking`.
  std::string render_values(const jinja::Value& messages, bool add_generation_prompt,
                            const jinja::Value::Dict& extra = {}) const;

  /// Makes `strftime_now` read this time instead of the clock (tests).
  void set_fixed_time(std::time_t time) { fixed_time_ = time; }

  const std::string& source() const { return source_; }
  const std::string& name() const { return name_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::string name_;
  std::optional<std::time_t> fixed_time_;
  jinja::Template template_;
};

} // namespace caflm
