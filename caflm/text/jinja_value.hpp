#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace caflm::jinja {

class Value;

/// Arguments of a call: positional values, then `name=value` pairs.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

/// A callable value: a global function, a macro or a bound method.
using Function = std::function<Value(CallArgs&)>;

/// A value of the template language, with Python's semantics as Jinja2 sees
/// them: truthiness, equality, `str()` and `repr()` forms. Lists and dicts
/// are shared by reference, as in Python; dicts keep insertion order.
class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>; ///< insertion order

  Value() = default; ///< undefined
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i)
    : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s)
    : Value(std::string(s)) {}
  static Value list(List items = {}, bool tuple = false);
  static Value dict(Dict items = {});
  /// A `namespace()` object: a dict whose attributes `set` may assign.
  static Value namespace_object(Dict items = {});
  static Value function(std::string name, Function fn);
  /// An undefined value that remembers the name that produced it.
  static Value undefined(std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && namespace_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  /// Int, Float or Bool as a double.
  double as_number() const;
  const std::string& as_string() const { return *string_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const Function& as_function() const { return *function_; }
  /// For undefined values: the name that was looked up; for functions: theirs.
  const std::string& name() const { return name_; }

  /// Python truthiness; undefined is false.
  bool truthy() const;
  /// A dict's entry, or nullptr.
  Value* find(std::string_view key) const;
  /// Sets a dict entry, keeping the position of an existing key.
  void set(const std::string& key, Value value) const;

  /// Python `str()`, except that undefined is empty (how `{{ }}` prints).
  std::string to_str() const;
  /// Python `repr()`.
  std::string repr() const;
  /// `json.dumps` with Python's spacing: separators ", " and ": " without an
  /// indent, "," and ": " with one.
  /// `separators` (item, key) replace those defaults.
  std::string to_json(std::optional<int> indent = std::nullopt, bool ensure_ascii = false,
                      bool sort_keys = false,
                      std::optional<std::pair<std::string, std::string>> separators = {}) const;
  /// The Python type name, for error messages.
  std::string type_name() const;

  /// Python `==` (1 == 1.0 == True; undefined equals undefined).
  friend bool operator==(const Value& a, const Value& b);
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::Undefined;
  bool bool_ = false;
  bool tuple_ = false;
  bool namespace_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> function_;
  std::string name_;
};

/// Python's `repr()` of a float: the shortest text that reads back the same.
std::string format_float(double d);

/// Python's `repr()` of a string, quotes included.
std::string python_repr(std::string_view s);

/// UTF-8 text as code points (invalid bytes pass as themselves) and back.
std::u32string utf8_to_code_points(std::string_view s);
std::string code_points_to_utf8(std::u32string_view s);

} // namespace caflm::jinja
