#include "caflm/text/jinja_builtins.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "caflm/text/jinja_lexer.hpp"
#include "caflm/text/unicode.hpp"

namespace caflm::jinja {

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw TemplateError(message);
}

bool arg_bool(const CallArgs& args, std::size_t index, const char* name, bool fallback) {
  const Value* v = arg(args, index, name);
  return v && !v->is_undefined() ? v->truthy() : fallback;
}

int64_t arg_int(const CallArgs& args, std::size_t index, const char* name, int64_t fallback) {
  const Value* v = arg(args, index, name);
  if (!v || v->is_undefined() || v->is_none())
    return fallback;
  if (!v->is_number() && !v->is_bool())
    fail("expected an integer argument '" + std::string(name) + "', got " + v->type_name());
  return static_cast<int64_t>(v->is_int() ? v->as_int() : v->as_number());
}

std::string arg_string(const CallArgs& args, std::size_t index, const char* name,
                       const std::string& fallback) {
  const Value* v = arg(args, index, name);
  return v && !v->is_undefined() ? v->to_str() : fallback;
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

/// The code points of `s` mapped one by one.
template <typename Map>
std::string map_code_points(const std::string& s, Map map) {
  std::u32string cps = utf8_to_code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i)
    cps[i] = map(cps[i], i == 0 ? U' ' : cps[i - 1], i);
  return code_points_to_utf8(cps);
}

/// Simple case mapping for the scripts chat templates meet: ASCII, Latin-1,
/// Latin Extended-A, Greek and Cyrillic. Other code points map to themselves.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z')
    return c - 32;
  if (c < 0x80)
    return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7))
    return c - 32;
  if (c == 0xFF)
    return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    // Pairs: even upper, odd lower, except 0x139-0x148 and 0x179-0x17E (odd upper).
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_lower = odd_upper ? (c % 2 == 0) : (c % 2 == 1);
    return is_lower ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2)
    return c - 32;
  if (c == 0x3C2) // final sigma
    return 0x3A3;
  if (c >= 0x430 && c <= 0x44F)
    return c - 32;
  if (c >= 0x450 && c <= 0x45F)
    return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z')
    return c + 32;
  if (c < 0x80)
    return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7)
    return c + 32;
  if (c == 0x178)
    return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_upper = odd_upper ? (c % 2 == 1) : (c % 2 == 0);
    return is_upper ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
    return c + 32;
  if (c >= 0x410 && c <= 0x42F)
    return c + 32;
  if (c >= 0x400 && c <= 0x40F)
    return c + 80;
  return c;
}

bool is_letter(char32_t c) {
  return (unicode::char_class(c) & unicode::kLetter) != 0;
}
bool is_number(char32_t c) {
  return (unicode::char_class(c) & unicode::kNumber) != 0;
}
/// A letter that has case: Python's title() and capitalize() look for these.
bool is_cased(char32_t c) {
  return to_upper(c) != c || to_lower(c) != c;
}

std::string upper(const std::string& s) {
  return map_code_points(s, [](char32_t c, char32_t, std::size_t) { return to_upper(c); });
}
std::string lower(const std::string& s) {
  return map_code_points(s, [](char32_t c, char32_t, std::size_t) { return to_lower(c); });
}
std::string capitalize(const std::string& s) {
  return map_code_points(
      s, [](char32_t c, char32_t, std::size_t i) { return i == 0 ? to_upper(c) : to_lower(c); });
}
/// Python's str.title(): a cased letter after an uncased one starts a word.
std::string python_title(const std::string& s) {
  return map_code_points(s, [](char32_t c, char32_t prev, std::size_t i) {
    return i == 0 || !is_cased(prev) ? to_upper(c) : to_lower(c);
  });
}
/// Jinja's `title` filter: words begin after blanks and "-({[<".
std::string jinja_title(const std::string& s) {
  return map_code_points(s, [](char32_t c, char32_t prev, std::size_t i) {
    bool starts = i == 0 || is_python_space(prev) || prev == U'-' || prev == U'(' || prev == U'{' ||
                  prev == U'[' || prev == U'<';
    return starts ? to_upper(c) : to_lower(c);
  });
}

std::size_t length_of(const Value& v) {
  if (v.is_string())
    return is_ascii(v.as_string()) ? v.as_string().size()
                                   : utf8_to_code_points(v.as_string()).size();
  if (v.is_list())
    return v.as_list().size();
  if (v.is_dict())
    return v.as_dict().size();
  if (v.is_undefined())
    return 0;
  fail("object of type '" + v.type_name() + "' has no len()");
}

} // namespace

const Value* arg(const CallArgs& args, std::size_t index, const char* name) {
  if (index < args.positional.size())
    return &args.positional[index];
  for (const auto& [key, value] : args.keyword)
    if (key == name)
      return &value;
  return nullptr;
}

Value::List iterate(const Value& v) {
  if (v.is_list())
    return v.as_list();
  if (v.is_dict()) {
    Value::List keys;
    for (const auto& entry : v.as_dict())
      keys.emplace_back(entry.first);
    return keys;
  }
  if (v.is_string()) {
    Value::List chars;
    for (char32_t c : utf8_to_code_points(v.as_string()))
      chars.emplace_back(code_points_to_utf8(std::u32string(1, c)));
    return chars;
  }
  if (v.is_undefined())
    return {};
  fail("'" + v.type_name() + "' object is not iterable");
}

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (from.empty()) { // Python inserts `to` around every character
    std::u32string cps = utf8_to_code_points(s);
    std::string out;
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += code_points_to_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count)
      out += to;
    return out;
  }
  std::string out;
  std::size_t pos = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    std::size_t hit = s.find(from, pos);
    if (hit == std::string::npos)
      break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

/// Python's str.split(sep, maxsplit); no `sep` splits at runs of whitespace.
Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Value::List parts;
  if (!sep || sep->is_none() || sep->is_undefined()) {
    std::u32string cps = utf8_to_code_points(s);
    std::size_t i = 0;
    while (true) {
      while (i < cps.size() && is_python_space(cps[i]))
        ++i;
      if (i >= cps.size())
        break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::size_t end = cps.size();
        while (end > i && is_python_space(cps[end - 1]))
          --end;
        parts.emplace_back(code_points_to_utf8(cps.substr(i, end - i)));
        break;
      }
      std::size_t start = i;
      while (i < cps.size() && !is_python_space(cps[i]))
        ++i;
      parts.emplace_back(code_points_to_utf8(cps.substr(start, i - start)));
    }
    return Value::list(std::move(parts));
  }
  const std::string delimiter = sep->to_str();
  if (delimiter.empty())
    fail("empty separator");
  std::size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    std::size_t hit = s.find(delimiter, pos);
    if (hit == std::string::npos)
      break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + delimiter.size();
  }
  parts.emplace_back(s.substr(pos));
  return Value::list(std::move(parts));
}

/// Python's str.startswith / endswith, with a string or a tuple of them.
bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  if (affix.is_list()) {
    for (const Value& item : affix.as_list())
      if (affix_matches(s, item, prefix))
        return true;
    return false;
  }
  const std::string& a = affix.to_str();
  if (a.size() > s.size())
    return false;
  return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

/// `x[attribute]` with dotted paths ("a.b") and integer parts, as Jinja's
/// make_attrgetter reads them.
Value get_attribute(const Value& v, const std::string& path) {
  Value current = v;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (current.is_dict()) {
      const Value* found = current.find(part);
      current = found ? *found : Value::undefined(part);
    } else if (current.is_list() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      std::size_t index = std::stoul(part);
      current =
          index < current.as_list().size() ? current.as_list()[index] : Value::undefined(part);
    } else {
      return Value::undefined(part);
    }
    if (dot == std::string::npos)
      break;
    pos = dot + 1;
  }
  return current;
}

} // namespace

bool less_than(const Value& a, const Value& b, bool case_sensitive) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool()))
    return a.as_number() < b.as_number();
  if (a.is_string() && b.is_string())
    return case_sensitive ? a.as_string() < b.as_string()
                          : lower(a.as_string()) < lower(b.as_string());
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_than(x[i], y[i], case_sensitive))
        return true;
      if (less_than(y[i], x[i], case_sensitive))
        return false;
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
       "'");
}

namespace {

/// Arguments after the first `skip` positional ones, for select/map.
CallArgs rest_args(const CallArgs& args, std::size_t skip) {
  CallArgs rest;
  for (std::size_t i = skip; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

Value select_items(const Value& subject, CallArgs& args, bool by_attribute, bool keep) {
  Value::List out;
  std::size_t skip = by_attribute ? 1 : 0;
  std::string attribute = by_attribute ? arg_string(args, 0, "attribute", "") : "";
  const Value* test = args.positional.size() > skip ? &args.positional[skip] : nullptr;
  CallArgs test_args = rest_args(args, skip + 1);
  for (const Value& item : iterate(subject)) {
    Value probe = by_attribute ? get_attribute(item, attribute) : item;
    bool passes = test ? apply_test(test->to_str(), probe, test_args) : probe.truthy();
    if (passes == keep)
      out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&#34;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// Jinja's `indent`: every line but the first (and blank ones unless
/// `blank`) gets the prefix.
std::string indent_text(const std::string& s, const std::string& prefix, bool first, bool blank) {
  std::vector<std::string> lines;
  std::string text = s + "\n"; // as Jinja does, so a trailing newline keeps its line
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find_first_of("\r\n", pos);
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + ((text[nl] == '\r' && nl + 1 < text.size() && text[nl + 1] == '\n') ? 2 : 1);
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty())
        out += prefix;
    }
    out += lines[i];
  }
  return first ? prefix + out : out;
}

} // namespace

std::string percent_format(const std::string& format, const Value::List& values) {
  std::string out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    char spec = format[++i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size())
      fail("not enough arguments for format string");
    const Value& v = values[next++];
    if (spec == 's')
      out += v.to_str();
    else if (spec == 'r')
      out += v.repr();
    else if (spec == 'd' || spec == 'i')
      out += std::to_string(v.is_int() ? v.as_int() : static_cast<int64_t>(v.as_number()));
    else if (spec == 'f') {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%f", v.as_number());
      out += buf;
    } else
      fail(std::string("unsupported format character '") + spec + "'");
  }
  return out;
}

namespace {

Value to_int(const Value& v, const Value& fallback) {
  if (v.is_int())
    return v;
  if (v.is_bool())
    return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float())
    return Value(static_cast<int64_t>(v.as_number()));
  if (v.is_string()) {
    std::string s = python_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0')
      return Value(static_cast<int64_t>(i));
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0')
      return Value(static_cast<int64_t>(d));
  }
  return fallback;
}

} // namespace

bool is_python_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::u32string cps = utf8_to_code_points(s);
  std::u32string set = chars ? utf8_to_code_points(*chars) : std::u32string();
  auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_python_space(c);
  };
  std::size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip(cps[begin]))
      ++begin;
  if (right)
    while (end > begin && strip(cps[end - 1]))
      --end;
  return code_points_to_utf8(cps.substr(begin, end - begin));
}

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  const Value& v = subject;
  if (name == "safe" || (name == "string" && v.is_string()))
    return v;
  if (name == "string")
    return Value(v.to_str());
  if (name == "trim") {
    const Value* chars = arg(args, 0, "chars");
    std::string set = chars && !chars->is_none() ? chars->to_str() : std::string();
    return Value(python_strip(v.to_str(), chars && !chars->is_none() ? &set : nullptr, true, true));
  }
  if (name == "upper")
    return Value(upper(v.to_str()));
  if (name == "lower")
    return Value(lower(v.to_str()));
  if (name == "capitalize")
    return Value(capitalize(v.to_str()));
  if (name == "title")
    return Value(jinja_title(v.to_str()));
  if (name == "length" || name == "count")
    return Value(static_cast<int64_t>(length_of(v)));
  if (name == "first" || name == "last") {
    Value::List items = iterate(v);
    if (items.empty())
      return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    std::string separator = arg_string(args, 0, "d", "");
    const Value* attribute = arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      out += (first ? "" : separator) +
             (attribute ? get_attribute(item, attribute->to_str()) : item).to_str();
      first = false;
    }
    return Value(out);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = arg(args, 0, "default_value");
    bool boolean = arg_bool(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy()))
      return fallback ? *fallback : Value("");
    return v;
  }
  if (name == "tojson") {
    // Hugging Face's tojson(x, ensure_ascii=False, indent=None,
    // separators=None, sort_keys=False): plain json.dumps.
    std::optional<int> indent;
    if (const Value* i = arg(args, 1, "indent"); i && !i->is_none() && !i->is_undefined())
      indent = static_cast<int>(i->as_number());
    std::optional<std::pair<std::string, std::string>> separators;
    if (const Value* s = arg(args, 2, "separators"); s && s->is_list() && s->as_list().size() == 2)
      separators.emplace(s->as_list()[0].to_str(), s->as_list()[1].to_str());
    return Value(v.to_json(indent, arg_bool(args, 0, "ensure_ascii", false),
                           arg_bool(args, 3, "sort_keys", false), separators));
  }
  if (name == "items") {
    Value::List out;
    if (v.is_dict())
      for (const auto& [key, value] : v.as_dict())
        out.push_back(Value::list({Value(key), value}, true));
    else if (!v.is_undefined())
      fail("items filter needs a mapping, got " + v.type_name());
    return Value::list(std::move(out));
  }
  if (name == "list")
    return Value::list(iterate(v));
  if (name == "int")
    return to_int(v, Value(arg_int(args, 0, "default", 0)));
  if (name == "float") {
    if (v.is_number() || v.is_bool())
      return Value(v.as_number());
    char* end = nullptr;
    std::string s = v.to_str();
    double d = std::strtod(s.c_str(), &end);
    return !s.empty() && *end == '\0' ? Value(d) : Value(0.0);
  }
  if (name == "abs") {
    if (v.is_int())
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    return Value(std::fabs(v.as_number()));
  }
  if (name == "round") {
    int64_t precision = arg_int(args, 0, "precision", 0);
    std::string method = arg_string(args, 1, "method", "common");
    double x = v.as_number();
    if (method == "common") {
      // Python's round(): the exact binary value rounded half to even, which
      // is what printf does with the decimal digits it is asked for.
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f",
                    static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
      return Value(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(precision));
    return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (name == "replace") {
    return Value(replace_all(v.to_str(), arg_string(args, 0, "old", ""),
                             arg_string(args, 1, "new", ""), arg_int(args, 2, "count", -1)));
  }
  if (name == "selectattr" || name == "rejectattr")
    return select_items(v, args, true, name == "selectattr");
  if (name == "select" || name == "reject")
    return select_items(v, args, false, name == "select");
  if (name == "map") {
    Value::List out;
    const Value* attribute = nullptr;
    for (const auto& [key, value] : args.keyword)
      if (key == "attribute")
        attribute = &value;
    if (attribute) {
      const Value* fallback = nullptr;
      for (const auto& [key, value] : args.keyword)
        if (key == "default")
          fallback = &value;
      for (const Value& item : iterate(v)) {
        Value got = get_attribute(item, attribute->to_str());
        out.push_back(got.is_undefined() && fallback ? *fallback : got);
      }
      return Value::list(std::move(out));
    }
    if (args.positional.empty())
      fail("map needs a filter name or attribute=");
    CallArgs filter_args = rest_args(args, 1);
    for (const Value& item : iterate(v))
      out.push_back(apply_filter(args.positional[0].to_str(), item, filter_args));
    return Value::list(std::move(out));
  }
  if (name == "escape" || name == "e" || name == "forceescape")
    return Value(html_escape(v.to_str()));
  if (name == "indent") {
    const Value* width = arg(args, 0, "width");
    std::string prefix =
        width && width->is_string()
            ? width->as_string()
            : std::string(static_cast<std::size_t>(arg_int(args, 0, "width", 4)), ' ');
    return Value(indent_text(v.to_str(), prefix, arg_bool(args, 1, "first", false),
                             arg_bool(args, 2, "blank", false)));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string cps = utf8_to_code_points(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(code_points_to_utf8(cps));
    }
    Value::List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    Value::List items = iterate(v);
    bool reverse = arg_bool(args, 0, "reverse", false);
    bool case_sensitive = arg_bool(args, 1, "case_sensitive", false);
    const Value* attribute = arg(args, 2, "attribute");
    auto key = [&](const Value& item) {
      return attribute ? get_attribute(item, attribute->to_str()) : item;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? less_than(key(b), key(a), case_sensitive)
                     : less_than(key(a), key(b), case_sensitive);
    });
    return Value::list(std::move(items));
  }
  if (name == "dictsort") {
    Value::List out;
    for (const auto& [key, value] : v.as_dict())
      out.push_back(Value::list({Value(key), value}, true));
    bool case_sensitive = arg_bool(args, 0, "case_sensitive", false);
    bool by_value = arg_string(args, 1, "by", "key") == "value";
    bool reverse = arg_bool(args, 2, "reverse", false);
    std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
      const Value& x = a.as_list()[by_value ? 1 : 0];
      const Value& y = b.as_list()[by_value ? 1 : 0];
      return reverse ? less_than(y, x, case_sensitive) : less_than(x, y, case_sensitive);
    });
    return Value::list(std::move(out));
  }
  if (name == "unique") {
    Value::List out;
    for (const Value& item : iterate(v))
      if (std::find(out.begin(), out.end(), item) == out.end())
        out.push_back(item);
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Value* attribute = arg(args, 0, "attribute");
    Value total = arg(args, 1, "start") ? *arg(args, 1, "start") : Value(int64_t{0});
    for (const Value& item : iterate(v)) {
      Value x = attribute ? get_attribute(item, attribute->to_str()) : item;
      if (total.is_int() && x.is_int())
        total = Value(total.as_int() + x.as_int());
      else
        total = Value(total.as_number() + x.as_number());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    Value::List items = iterate(v);
    if (items.empty())
      return Value::undefined(name);
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? less_than(item, best, false) : less_than(best, item, false))
        best = item;
    return best;
  }
  if (name == "attr")
    return get_attribute(v, arg_string(args, 0, "name", ""));
  if (name == "format") {
    Value::List values = args.positional;
    return Value(percent_format(v.to_str(), values));
  }
  if (name == "wordcount")
    return Value(static_cast<int64_t>(split(v.to_str(), nullptr, -1).as_list().size()));
  if (name == "center") {
    std::size_t width = static_cast<std::size_t>(arg_int(args, 0, "width", 80));
    std::string s = v.to_str();
    std::size_t len = length_of(Value(s));
    if (len >= width)
      return Value(s);
    std::size_t total = width - len, left = total / 2 + (total & width & 1);
    return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
  }
  if (name == "batch") {
    std::size_t size =
        static_cast<std::size_t>(std::max<int64_t>(1, arg_int(args, 0, "linecount", 1)));
    Value::List out, current;
    for (const Value& item : iterate(v)) {
      current.push_back(item);
      if (current.size() == size) {
        out.push_back(Value::list(std::move(current)));
        current.clear();
      }
    }
    if (!current.empty())
      out.push_back(Value::list(std::move(current)));
    return Value::list(std::move(out));
  }
  if (name == "pprint")
    return Value(v.repr());
  fail("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  auto other = [&]() -> const Value& {
    if (args.positional.empty())
      fail("test '" + name + "' needs an argument");
    return args.positional[0];
  };
  if (name == "defined")
    return !v.is_undefined();
  if (name == "undefined")
    return v.is_undefined();
  if (name == "none")
    return v.is_none();
  if (name == "boolean")
    return v.is_bool();
  if (name == "true")
    return v.is_bool() && v.as_bool();
  if (name == "false")
    return v.is_bool() && !v.as_bool();
  if (name == "integer")
    return v.is_int();
  if (name == "float")
    return v.is_float();
  if (name == "number")
    return v.is_number() || v.is_bool();
  if (name == "string")
    return v.is_string();
  if (name == "mapping")
    return v.is_dict();
  // jinja2's Undefined has __iter__ and __len__: it passes both.
  if (name == "iterable" || name == "sequence")
    return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable")
    return v.is_function();
  if (name == "odd" || name == "even") {
    if (!v.is_int())
      fail("test '" + name + "' needs an integer");
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby")
    return other().as_number() != 0 && std::fmod(v.as_number(), other().as_number()) == 0;
  if (name == "eq" || name == "equalto" || name == "==")
    return v == other();
  if (name == "ne" || name == "!=")
    return v != other();
  if (name == "lt" || name == "lessthan" || name == "<")
    return less_than(v, other());
  if (name == "gt" || name == "greaterthan" || name == ">")
    return less_than(other(), v);
  if (name == "le" || name == "<=")
    return !less_than(other(), v);
  if (name == "ge" || name == ">=")
    return !less_than(v, other());
  if (name == "in") {
    const Value& container = other();
    if (container.is_string())
      return container.as_string().find(v.to_str()) != std::string::npos;
    if (container.is_dict())
      return v.is_string() && container.find(v.as_string()) != nullptr;
    for (const Value& item : iterate(container))
      if (item == v)
        return true;
    return false;
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind())
      return false;
    if (v.is_list())
      return &v.as_list() == &o.as_list();
    if (v.is_dict())
      return &v.as_dict() == &o.as_dict();
    return v == o;
  }
  if (name == "lower")
    return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper")
    return v.is_string() && upper(v.as_string()) == v.as_string();
  if (name == "escaped")
    return false;
  fail("unknown test '" + name + "'");
}

std::optional<Value> bound_method(const Value& object, const std::string& name) {
  auto method = [&](auto body) {
    Value self = object;
    return Value::function(name, [self, body](CallArgs& args) { return body(self, args); });
  };
  if (object.is_string()) {
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool left = name != "rstrip", right = name != "lstrip";
      return method([left, right](const Value& s, CallArgs& args) {
        const Value* chars = arg(args, 0, "chars");
        std::string set = chars && !chars->is_none() ? chars->to_str() : std::string();
        return Value(
            python_strip(s.as_string(), chars && !chars->is_none() ? &set : nullptr, left, right));
      });
    }
    if (name == "split")
      return method([](const Value& s, CallArgs& args) {
        return split(s.as_string(), arg(args, 0, "sep"), arg_int(args, 1, "maxsplit", -1));
      });
    if (name == "startswith" || name == "endswith") {
      bool prefix = name == "startswith";
      return method([prefix](const Value& s, CallArgs& args) {
        const Value* affix = arg(args, 0, prefix ? "prefix" : "suffix");
        if (!affix)
          fail("startswith/endswith needs an argument");
        return Value(affix_matches(s.as_string(), *affix, prefix));
      });
    }
    if (name == "upper")
      return method([](const Value& s, CallArgs&) { return Value(upper(s.as_string())); });
    if (name == "lower")
      return method([](const Value& s, CallArgs&) { return Value(lower(s.as_string())); });
    if (name == "title")
      return method([](const Value& s, CallArgs&) { return Value(python_title(s.as_string())); });
    if (name == "capitalize")
      return method([](const Value& s, CallArgs&) { return Value(capitalize(s.as_string())); });
    if (name == "replace")
      return method([](const Value& s, CallArgs& args) {
        return Value(replace_all(s.as_string(), arg_string(args, 0, "old", ""),
                                 arg_string(args, 1, "new", ""), arg_int(args, 2, "count", -1)));
      });
    if (name == "find" || name == "count")
      return method([name](const Value& s, CallArgs& args) {
        std::string needle = arg_string(args, 0, "sub", "");
        const std::string& hay = s.as_string();
        if (name == "find") {
          std::size_t at = hay.find(needle);
          return Value(at == std::string::npos
                           ? int64_t{-1}
                           : static_cast<int64_t>(utf8_to_code_points(hay.substr(0, at)).size()));
        }
        int64_t n = 0;
        for (std::size_t at = hay.find(needle); !needle.empty() && at != std::string::npos;
             at = hay.find(needle, at + needle.size()))
          ++n;
        return Value(n);
      });
    if (name == "join")
      return method([](const Value& s, CallArgs& args) {
        std::string out;
        bool first = true;
        const Value* items = arg(args, 0, "iterable");
        for (const Value& item : items ? iterate(*items) : Value::List{}) {
          out += (first ? "" : s.as_string()) + item.to_str();
          first = false;
        }
        return Value(out);
      });
    if (name == "splitlines")
      return method([](const Value& s, CallArgs&) {
        Value::List lines;
        const std::string& text = s.as_string();
        std::size_t pos = 0;
        while (pos < text.size()) {
          std::size_t nl = text.find_first_of("\r\n", pos);
          if (nl == std::string::npos) {
            lines.emplace_back(text.substr(pos));
            break;
          }
          lines.emplace_back(text.substr(pos, nl - pos));
          pos = nl + ((text[nl] == '\r' && nl + 1 < text.size() && text[nl + 1] == '\n') ? 2 : 1);
        }
        return Value::list(std::move(lines));
      });
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
        name == "isupper" || name == "islower")
      return method([name](const Value& s, CallArgs&) {
        std::u32string cps = utf8_to_code_points(s.as_string());
        if (cps.empty())
          return Value(false);
        if (name == "isupper")
          return Value(upper(s.as_string()) == s.as_string() &&
                       lower(s.as_string()) != s.as_string());
        if (name == "islower")
          return Value(lower(s.as_string()) == s.as_string() &&
                       upper(s.as_string()) != s.as_string());
        for (char32_t c : cps) {
          bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                    : name == "isspace" ? is_python_space(c)
                    : name == "isalpha" ? is_letter(c)
                                        : (is_letter(c) || is_number(c));
          if (!ok)
            return Value(false);
        }
        return Value(true);
      });
    if (name == "format")
      return method([](const Value& s, CallArgs& args) {
        // str.format with "{}" and "{0}" fields only.
        std::string out;
        const std::string& f = s.as_string();
        std::size_t auto_index = 0;
        for (std::size_t i = 0; i < f.size(); ++i) {
          if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
            out += '{';
            ++i;
          } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
            out += '}';
            ++i;
          } else if (f[i] == '{') {
            std::size_t close = f.find('}', i);
            if (close == std::string::npos)
              fail("unterminated '{' in format string");
            std::string field = f.substr(i + 1, close - i - 1);
            const Value* v = nullptr;
            if (field.empty())
              v = arg(args, auto_index++, "");
            else if (std::isdigit(static_cast<unsigned char>(field[0])))
              v = arg(args, std::stoul(field), "");
            else
              v = arg(args, SIZE_MAX, field.c_str());
            if (!v)
              fail("format field '" + field + "' has no argument");
            out += v->to_str();
            i = close;
          } else {
            out += f[i];
          }
        }
        return Value(out);
      });
  }
  if (object.is_dict()) {
    if (name == "get")
      return method([](const Value& d, CallArgs& args) {
        const Value* key = arg(args, 0, "key");
        const Value* found = key && key->is_string() ? d.find(key->as_string()) : nullptr;
        if (found)
          return *found;
        const Value* fallback = arg(args, 1, "default");
        return fallback ? *fallback : Value::none();
      });
    if (name == "items")
      return method([](const Value& d, CallArgs& args) { return apply_filter("items", d, args); });
    if (name == "keys")
      return method([](const Value& d, CallArgs&) { return Value::list(iterate(d)); });
    if (name == "values")
      return method([](const Value& d, CallArgs&) {
        Value::List out;
        for (const auto& entry : d.as_dict())
          out.push_back(entry.second);
        return Value::list(std::move(out));
      });
  }
  if (object.is_list()) {
    if (name == "index" || name == "count")
      return method([name](const Value& l, CallArgs& args) {
        const Value* needle = arg(args, 0, "value");
        int64_t n = 0;
        for (std::size_t i = 0; i < l.as_list().size(); ++i) {
          if (needle && l.as_list()[i] == *needle) {
            if (name == "index")
              return Value(static_cast<int64_t>(i));
            ++n;
          }
        }
        if (name == "index")
          fail("value is not in list");
        return Value(n);
      });
  }
  return std::nullopt;
}

} // namespace caflm::jinja
