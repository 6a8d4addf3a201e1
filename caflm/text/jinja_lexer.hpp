#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace caflm::jinja {

/// A template that cannot be lexed, parsed or rendered. The message names
/// the line and column where that is known.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message)
    : std::runtime_error(message) {}
  TemplateError(const std::string& message, int line, int column)
    : std::runtime_error("line " + std::to_string(line) + ", column " + std::to_string(column) +
                         ": " + message)
    , has_position_(true) {}

  /// Whether the message already names a line and column.
  bool has_position() const { return has_position_; }

 private:
  bool has_position_ = false;
};

/// The template called `raise_exception(message)`; what() is the message.
class RaisedException : public TemplateError {
 public:
  explicit RaisedException(const std::string& message)
    : TemplateError(message) {}
};

enum class TokenKind {
  Text,          ///< template text, whitespace control already applied
  VariableBegin, ///< {{
  VariableEnd,   ///< }}
  BlockBegin,    ///< {%
  BlockEnd,      ///< %}
  Name,
  String, ///< text holds the decoded value
  Integer,
  Float,
  Operator, ///< text holds the operator: "==", "(", "|", ...
  End,      ///< end of the template
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;
  int column = 1;
};

/// Whitespace options, as Hugging Face sets them for chat templates.
struct LexerOptions {
  bool trim_blocks = true;            ///< drop the newline after a block or comment tag
  bool lstrip_blocks = true;          ///< drop blanks before a block or comment tag on its line
  bool keep_trailing_newline = false; ///< false: drop one newline at the end of the template
};

/// Splits a template into text and the tokens of its tags, as Jinja2's lexer
/// does: comments vanish, `{% raw %}` bodies become text, `-`/`+` and the
/// options above trim the text around tags, and newlines become "\n".
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

} // namespace caflm::jinja
