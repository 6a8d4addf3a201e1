#pragma once

#include <optional>
#include <string>

#include "caflm/text/jinja_value.hpp"

namespace caflm::jinja {

/// The call's argument at position `index` or named `name`, or null.
const Value* arg(const CallArgs& args, std::size_t index, const char* name);

/// Applies the filter `name` (`subject | name(args)`), as Jinja2 with Hugging
/// Face's `tojson` defines it. Throws TemplateError for an unknown filter or
/// unusable arguments (the caller adds the position).
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);

/// Applies the test `name` (`subject is name(args)`).
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

/// The method `name` of a string, dict or list bound to `object` (Python's
/// `str.strip`, `dict.get`, ...), or nothing.
std::optional<Value> bound_method(const Value& object, const std::string& name);

/// What a for loop or `list()` sees: a list's items, a dict's keys, a
/// string's characters; nothing for undefined.
Value::List iterate(const Value& v);

/// Python's `<`; throws TemplateError for types that do not compare.
bool less_than(const Value& a, const Value& b, bool case_sensitive = true);

/// Python's `%` string formatting for %s, %d, %i, %r, %f and %%.
std::string percent_format(const std::string& format, const Value::List& values);

/// Python's `str.isspace()` for one code point.
bool is_python_space(char32_t cp);

/// Python's `str.strip/lstrip/rstrip`: `chars` null strips whitespace.
std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right);

} // namespace caflm::jinja
