#include "caflm/text/jinja_lexer.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace caflm::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/// Python's str.rstrip() / lstrip() for ASCII whitespace.
void strip_right(std::string& s) {
  while (!s.empty() && is_space(s.back()))
    s.pop_back();
}

/// Newlines as "\n", and without the single trailing newline Jinja drops.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
    : src_(std::move(source))
    , options_(options) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n')
        line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool strip_next_text = false; // a `-` closed the previous tag
    while (pos <= src_.size()) {
      std::size_t open = find_tag(pos);
      std::string text =
          src_.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
      bool at_line_start = pos == 0 || src_[pos - 1] == '\n';
      if (strip_next_text) {
        std::size_t first = 0;
        while (first < text.size() && is_space(text[first]))
          ++first;
        text.erase(0, first);
        at_line_start = false;
      }
      strip_next_text = false;
      if (open == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char kind = src_[open + 1]; // '{', '%' or '#'
      char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        strip_right(text);
      } else if (options_.lstrip_blocks && kind != '{' && modifier != '+') {
        // Blanks between the line's start and a block tag go.
        std::size_t line_begin = text.rfind('\n');
        line_begin = line_begin == std::string::npos ? 0 : line_begin + 1;
        if (line_begin > 0 || at_line_start) {
          bool blank = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_begin),
                                   text.end(), [](char c) { return is_space(c); });
          if (blank)
            text.erase(line_begin);
        }
      }
      emit_text(std::move(text), pos);
      std::size_t inner = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#')
        pos = skip_comment(open, inner, strip_next_text);
      else if (kind == '%' && is_raw(inner))
        pos = read_raw(open, inner, strip_next_text);
      else
        pos = read_tag(open, inner, kind == '{', strip_next_text);
    }
    tokens_.push_back(Token{TokenKind::End, "", line_of(src_.size()), column_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(std::size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    return static_cast<int>(it - line_starts_.begin());
  }
  int column_of(std::size_t offset) const {
    return static_cast<int>(offset - line_starts_[static_cast<std::size_t>(line_of(offset) - 1)]) +
           1;
  }
  [[noreturn]] void fail(const std::string& message, std::size_t offset) const {
    throw TemplateError(message, line_of(offset), column_of(offset));
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  void emit_text(std::string text, std::size_t offset) {
    if (!text.empty())
      tokens_.push_back(
          Token{TokenKind::Text, std::move(text), line_of(offset), column_of(offset)});
  }

  /// After a block or comment's end: trim_blocks drops one newline.
  std::size_t after_block_end(std::size_t pos, char modifier) const {
    if (options_.trim_blocks && modifier != '+' && modifier != '-' && pos < src_.size() &&
        src_[pos] == '\n')
      return pos + 1;
    return pos;
  }

  std::size_t skip_comment(std::size_t open, std::size_t inner, bool& strip_next) {
    std::size_t close = src_.find("#}", inner);
    if (close == std::string::npos)
      fail("unterminated comment", open);
    char modifier = close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+')
                        ? src_[close - 1]
                        : '\0';
    strip_next = modifier == '-';
    return after_block_end(close + 2, modifier);
  }

  bool is_raw(std::size_t inner) const {
    std::size_t i = inner;
    while (i < src_.size() && is_space(src_[i]))
      ++i;
    if (src_.compare(i, 3, "raw") != 0)
      return false;
    i += 3;
    while (i < src_.size() && is_space(src_[i]))
      ++i;
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0 ||
           src_.compare(i, 3, "+%}") == 0;
  }

  /// `{% raw %}...{% endraw %}`: the body is text, tags and all.
  std::size_t read_raw(std::size_t open, std::size_t inner, bool& strip_next) {
    std::size_t raw_close = src_.find("%}", inner);
    char open_modifier = src_[raw_close - 1];
    std::size_t body_begin = after_block_end(raw_close + 2, open_modifier);
    for (std::size_t i = src_.find("{%", body_begin); i != std::string::npos;
         i = src_.find("{%", i + 2)) {
      std::size_t j = i + 2;
      char end_open_modifier = j < src_.size() ? src_[j] : '\0';
      if (end_open_modifier == '-' || end_open_modifier == '+')
        ++j;
      while (j < src_.size() && is_space(src_[j]))
        ++j;
      if (src_.compare(j, 6, "endraw") != 0)
        continue;
      j += 6;
      while (j < src_.size() && is_space(src_[j]))
        ++j;
      char close_modifier = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+'))
        close_modifier = src_[j++];
      if (src_.compare(j, 2, "%}") != 0)
        continue;
      std::string body = src_.substr(body_begin, i - body_begin);
      if (open_modifier == '-') {
        std::size_t first = 0;
        while (first < body.size() && is_space(body[first]))
          ++first;
        body.erase(0, first);
      }
      if (end_open_modifier == '-')
        strip_right(body);
      emit_text(std::move(body), body_begin);
      strip_next = close_modifier == '-';
      return after_block_end(j + 2, close_modifier);
    }
    fail("{% raw %} without {% endraw %}", open);
  }

  std::size_t read_tag(std::size_t open, std::size_t pos, bool variable, bool& strip_next) {
    tokens_.push_back(Token{variable ? TokenKind::VariableBegin : TokenKind::BlockBegin,
                            variable ? "{{" : "{%", line_of(open), column_of(open)});
    int depth = 0;
    while (true) {
      while (pos < src_.size() && is_space(src_[pos]))
        ++pos;
      if (pos >= src_.size())
        fail(variable ? "unterminated '{{'" : "unterminated '{%'", open);
      if (depth == 0) {
        const char* close = variable ? "}}" : "%}";
        char modifier = src_[pos];
        bool has_modifier = modifier == '-' || (modifier == '+' && !variable);
        if (src_.compare(pos + (has_modifier ? 1 : 0), 2, close) == 0) {
          tokens_.push_back(Token{variable ? TokenKind::VariableEnd : TokenKind::BlockEnd, close,
                                  line_of(pos), column_of(pos)});
          pos += (has_modifier ? 1 : 0) + 2;
          strip_next = modifier == '-';
          return variable ? pos : after_block_end(pos, has_modifier ? modifier : '\0');
        }
      }
      pos = read_token(pos, depth);
    }
  }

  std::size_t read_token(std::size_t pos, int& depth) {
    const int line = line_of(pos), column = column_of(pos);
    char c = src_[pos];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t end = pos;
      while (end < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
      tokens_.push_back(Token{TokenKind::Name, src_.substr(pos, end - pos), line, column});
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c)))
      return read_number(pos, line, column);
    if (c == '\'' || c == '"')
      return read_string(pos, line, column);
    static const std::array<const char*, 26> operators = {
        "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
        ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "=", ";"};
    for (const char* op : operators) {
      std::size_t len = std::char_traits<char>::length(op);
      if (src_.compare(pos, len, op) == 0) {
        if (len == 1 && (c == '(' || c == '[' || c == '{'))
          ++depth;
        else if (len == 1 && (c == ')' || c == ']' || c == '}'))
          depth = std::max(0, depth - 1);
        tokens_.push_back(Token{TokenKind::Operator, op, line, column});
        return pos + len;
      }
    }
    fail(std::string("unexpected character '") + c + "'", pos);
  }

  std::size_t read_number(std::size_t pos, int line, int column) {
    std::size_t end = pos;
    auto digits = [&] {
      while (end < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      std::size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-'))
        ++exp;
      if (exp < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text = src_.substr(pos, end - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back(
        Token{is_float ? TokenKind::Float : TokenKind::Integer, std::move(text), line, column});
    return end;
  }

  static void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  /// A quoted string, with Python's backslash escapes decoded.
  std::size_t read_string(std::size_t pos, int line, int column) {
    const char quote = src_[pos];
    std::string value;
    std::size_t i = pos + 1;
    while (true) {
      if (i >= src_.size())
        fail("unterminated string", pos);
      char c = src_[i];
      if (c == quote)
        break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      char e = src_[i + 1];
      i += 2;
      auto hex = [&](std::size_t count) {
        char32_t cp = 0;
        for (std::size_t k = 0; k < count; ++k, ++i) {
          if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i])))
            fail("bad \\x, \\u or \\U escape in a string", pos);
          cp = cp * 16 + static_cast<char32_t>(std::stoi(std::string(1, src_[i]), nullptr, 16));
        }
        append_utf8(value, cp);
      };
      switch (e) {
      case 'n':
        value += '\n';
        break;
      case 't':
        value += '\t';
        break;
      case 'r':
        value += '\r';
        break;
      case 'a':
        value += '\a';
        break;
      case 'b':
        value += '\b';
        break;
      case 'f':
        value += '\f';
        break;
      case 'v':
        value += '\v';
        break;
      case '\\':
      case '\'':
      case '"':
        value += e;
        break;
      case '\n': // a line continuation
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
            cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
          append_utf8(value, cp);
        } else {
          value += '\\'; // Python keeps unknown escapes as they are
          value += e;
        }
      }
    }
    tokens_.push_back(Token{TokenKind::String, std::move(value), line, column});
    return i + 1;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

} // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

} // namespace caflm::jinja
