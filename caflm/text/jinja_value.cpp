#include "caflm/text/jinja_value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace caflm::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b)
  : kind_(Kind::Bool)
  , bool_(b) {}

Value::Value(int64_t i)
  : kind_(Kind::Int)
  , int_(i) {}

Value::Value(double d)
  : kind_(Kind::Float)
  , float_(d) {}

Value::Value(std::string s)
  : kind_(Kind::String)
  , string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::List;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::namespace_object(Dict items) {
  Value v = dict(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.function_ = std::make_shared<const Function>(std::move(fn));
  v.name_ = std::move(name);
  return v;
}

Value Value::undefined(std::string name) {
  Value v;
  v.name_ = std::move(name);
  return v;
}

double Value::as_number() const {
  switch (kind_) {
  case Kind::Int:
    return static_cast<double>(int_);
  case Kind::Float:
    return float_;
  case Kind::Bool:
    return bool_ ? 1.0 : 0.0;
  default:
    return 0.0;
  }
}

bool Value::truthy() const {
  switch (kind_) {
  case Kind::Undefined:
  case Kind::None:
    return false;
  case Kind::Bool:
    return bool_;
  case Kind::Int:
    return int_ != 0;
  case Kind::Float:
    return float_ != 0.0;
  case Kind::String:
    return !string_->empty();
  case Kind::List:
    return !list_->empty();
  case Kind::Dict:
    return namespace_ || !dict_->empty();
  case Kind::Function:
    return true;
  }
  return false;
}

Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict)
    return nullptr;
  for (auto& [k, v] : *dict_)
    if (k == key)
      return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value value) const {
  if (Value* existing = find(key))
    *existing = std::move(value);
  else
    dict_->emplace_back(key, std::move(value));
}

std::string format_float(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d < 0 ? "-inf" : "inf";
  // The shortest scientific form that reads back as the same double.
  char buf[64];
  for (int precision = 0; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, d);
    if (std::strtod(buf, nullptr) == d)
      break;
  }
  std::string text = buf;
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  std::size_t e_pos = text.find('e');
  int exponent = std::atoi(text.c_str() + e_pos + 1);
  std::string digits = text.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  // Python's repr switches to scientific notation outside [1e-4, 1e16).
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0)
    return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  auto int_len = static_cast<std::size_t>(exponent + 1);
  if (digits.size() <= int_len)
    return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::u32string utf8_to_code_points(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(c); // an invalid byte stands for itself
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string code_points_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

std::string python_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::string Value::to_str() const {
  switch (kind_) {
  case Kind::Undefined:
    return "";
  case Kind::String:
    return *string_;
  default:
    return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
  case Kind::Undefined:
    return "";
  case Kind::None:
    return "None";
  case Kind::Bool:
    return bool_ ? "True" : "False";
  case Kind::Int:
    return std::to_string(int_);
  case Kind::Float:
    return format_float(float_);
  case Kind::String:
    return python_repr(*string_);
  case Kind::List: {
    std::string out = tuple_ ? "(" : "[";
    for (std::size_t i = 0; i < list_->size(); ++i)
      out += (i ? ", " : "") + (*list_)[i].repr();
    if (tuple_ && list_->size() == 1)
      out += ",";
    return out + (tuple_ ? ")" : "]");
  }
  case Kind::Dict: {
    std::string out = namespace_ ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, v] : *dict_) {
      out += (first ? "" : ", ") + python_repr(k) + ": " + v.repr();
      first = false;
    }
    return out + (namespace_ ? "}>" : "}");
  }
  case Kind::Function:
    return "<function " + name_ + ">";
  }
  return "";
}

namespace {

void hex4(unsigned v, std::string& out) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", v);
  out += buf;
}

/// One byte below 0x80 as JSON writes it inside a string.
void json_ascii(char ch, std::string& out) {
  switch (ch) {
  case '"':
    out += "\\\"";
    break;
  case '\\':
    out += "\\\\";
    break;
  case '\n':
    out += "\\n";
    break;
  case '\r':
    out += "\\r";
    break;
  case '\t':
    out += "\\t";
    break;
  case '\b':
    out += "\\b";
    break;
  case '\f':
    out += "\\f";
    break;
  default:
    if (static_cast<unsigned char>(ch) < 0x20)
      hex4(static_cast<unsigned char>(ch), out);
    else
      out += ch;
  }
}

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  if (!ensure_ascii) {
    for (char ch : s)
      json_ascii(ch, out); // bytes from 0x80 up pass unchanged
  } else {
    for (char32_t cp : utf8_to_code_points(s)) {
      if (cp < 0x80) {
        json_ascii(static_cast<char>(cp), out);
      } else if (cp >= 0x10000) { // a surrogate pair, as Python writes it
        char32_t v = cp - 0x10000;
        hex4(0xD800 + static_cast<unsigned>(v >> 10), out);
        hex4(0xDC00 + static_cast<unsigned>(v & 0x3FF), out);
      } else {
        hex4(static_cast<unsigned>(cp), out);
      }
    }
  }
  out += '"';
}

struct JsonStyle {
  std::optional<int> indent;
  bool ensure_ascii;
  bool sort_keys;
  std::string item_separator;
  std::string key_separator;
};

void json_value(const Value& v, const JsonStyle& style, int depth, std::string& out) {
  const std::optional<int>& indent = style.indent;
  const bool ensure_ascii = style.ensure_ascii;
  auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<std::size_t>(*indent * level), ' ');
  };
  switch (v.kind()) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
  case Value::Kind::Function:
    out += "null";
    return;
  case Value::Kind::Bool:
    out += v.as_bool() ? "true" : "false";
    return;
  case Value::Kind::Int:
    out += std::to_string(v.as_int());
    return;
  case Value::Kind::Float: {
    double d = v.as_number();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                           : format_float(d);
    return;
  }
  case Value::Kind::String:
    json_string(v.as_string(), ensure_ascii, out);
    return;
  case Value::Kind::List: {
    const auto& items = v.as_list();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i)
        out += style.item_separator;
      if (indent)
        newline(depth + 1);
      json_value(items[i], style, depth + 1, out);
    }
    if (indent)
      newline(depth);
    out += ']';
    return;
  }
  case Value::Kind::Dict: {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : v.as_dict())
      entries.push_back(&entry);
    if (entries.empty()) {
      out += "{}";
      return;
    }
    if (style.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i)
        out += style.item_separator;
      if (indent)
        newline(depth + 1);
      json_string(entries[i]->first, ensure_ascii, out);
      out += style.key_separator;
      json_value(entries[i]->second, style, depth + 1, out);
    }
    if (indent)
      newline(depth);
    out += '}';
    return;
  }
  }
}

} // namespace

std::string Value::to_json(std::optional<int> indent, bool ensure_ascii, bool sort_keys,
                           std::optional<std::pair<std::string, std::string>> separators) const {
  JsonStyle style{indent, ensure_ascii, sort_keys, indent ? "," : ", ", ": "};
  if (separators) {
    style.item_separator = separators->first;
    style.key_separator = separators->second;
  }
  std::string out;
  json_value(*this, style, 0, out);
  return out;
}

std::string Value::type_name() const {
  switch (kind_) {
  case Kind::Undefined:
    return "Undefined";
  case Kind::None:
    return "NoneType";
  case Kind::Bool:
    return "bool";
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::String:
    return "str";
  case Kind::List:
    return tuple_ ? "tuple" : "list";
  case Kind::Dict:
    return namespace_ ? "Namespace" : "dict";
  case Kind::Function:
    return "function";
  }
  return "";
}

bool operator==(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  bool a_num = a.is_number() || a.is_bool();
  bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    auto as_integer = [](const Value& v) -> int64_t {
      return v.is_int() ? v.as_int() : v.as_bool();
    };
    if (!a.is_float() && !b.is_float())
      return as_integer(a) == as_integer(b);
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case Kind::Undefined:
  case Kind::None:
    return true;
  case Kind::String:
    return a.as_string() == b.as_string();
  case Kind::List:
    return a.as_list() == b.as_list();
  case Kind::Dict: {
    if (a.as_dict().size() != b.as_dict().size())
      return false;
    for (const auto& [k, v] : a.as_dict()) {
      const Value* other = b.find(k);
      if (!other || !(*other == v))
        return false;
    }
    return true;
  }
  case Kind::Function:
    return &a.as_function() == &b.as_function();
  default:
    return false;
  }
}

} // namespace caflm::jinja
