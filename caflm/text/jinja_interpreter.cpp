#include "caflm/text/jinja_interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "caflm/text/jinja_builtins.hpp"
#include "caflm/text/jinja_parser.hpp"

namespace caflm::jinja {

namespace {

using Frame = std::unordered_map<std::string, Value>;

/// Where control goes after a statement: on, or out of the loop iteration.
enum class Flow { Normal, Break, Continue };

Value global_range(CallArgs& args) {
  int64_t start = 0, stop = 0, step = 1;
  auto integer = [](const Value& v) {
    if (!v.is_int() && !v.is_bool())
      throw TemplateError("range() needs integers, got " + v.type_name());
    return v.is_int() ? v.as_int() : static_cast<int64_t>(v.as_bool());
  };
  const auto& p = args.positional;
  if (p.size() == 1) {
    stop = integer(p[0]);
  } else if (p.size() == 2 || p.size() == 3) {
    start = integer(p[0]);
    stop = integer(p[1]);
    if (p.size() == 3)
      step = integer(p[2]);
  } else {
    throw TemplateError("range() takes 1 to 3 arguments");
  }
  if (step == 0)
    throw TemplateError("range() step must not be zero");
  Value::List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.emplace_back(i);
  return Value::list(std::move(out));
}

Value keyword_dict(CallArgs& args, bool as_namespace) {
  Value::Dict items;
  for (const Value& positional : args.positional)
    if (positional.is_dict())
      items.insert(items.end(), positional.as_dict().begin(), positional.as_dict().end());
  Value out =
      as_namespace ? Value::namespace_object(std::move(items)) : Value::dict(std::move(items));
  for (auto& [key, value] : args.keyword)
    out.set(key, value);
  return out;
}

Value global_strftime_now(CallArgs& args) {
  const Value* format = arg(args, 0, "format");
  if (!format || !format->is_string())
    throw TemplateError("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  std::size_t n = std::strftime(buf, sizeof buf, format->as_string().c_str(), &local);
  return Value(std::string(buf, n));
}

bool is_integer_like(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t integer_of(const Value& v) {
  return v.is_int() ? v.as_int() : v.as_bool();
}

/// Python's floor division and modulo for integers.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  auto unsupported = [&]() -> Value {
    if (a.is_undefined() || b.is_undefined())
      throw TemplateError("'" + (a.is_undefined() ? a.name() : b.name()) + "' is undefined");
    throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() +
                        "' and '" + b.type_name() + "'");
  };
  bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  bool integers = is_integer_like(a) && is_integer_like(b);
  if (op == "+") {
    if (a.is_string() && b.is_string())
      return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      Value::List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (integers)
      return Value(integer_of(a) + integer_of(b));
    if (numbers)
      return Value(a.as_number() + b.as_number());
    return unsupported();
  }
  if (op == "-") {
    if (integers)
      return Value(integer_of(a) - integer_of(b));
    if (numbers)
      return Value(a.as_number() - b.as_number());
    return unsupported();
  }
  if (op == "*") {
    if (integers)
      return Value(integer_of(a) * integer_of(b));
    if (numbers)
      return Value(a.as_number() * b.as_number());
    const Value* seq = a.is_string() || a.is_list()   ? &a
                       : b.is_string() || b.is_list() ? &b
                                                      : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && is_integer_like(*count)) {
      int64_t n = integer_of(*count);
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i)
          out += seq->as_string();
        return Value(out);
      }
      Value::List out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
      return Value::list(std::move(out));
    }
    return unsupported();
  }
  if (op == "%" && a.is_string()) {
    return Value(percent_format(a.as_string(), b.is_tuple() ? b.as_list() : Value::List{b}));
  }
  if (!numbers)
    return unsupported();
  if ((op == "/" || op == "//" || op == "%") && b.as_number() == 0)
    throw TemplateError(op == "%" ? "integer modulo by zero" : "division by zero");
  if (op == "/")
    return Value(a.as_number() / b.as_number());
  if (op == "//") {
    if (integers)
      return Value(floor_div(integer_of(a), integer_of(b)));
    return Value(std::floor(a.as_number() / b.as_number()));
  }
  if (op == "%") {
    if (integers)
      return Value(integer_of(a) - floor_div(integer_of(a), integer_of(b)) * integer_of(b));
    double r = std::fmod(a.as_number(), b.as_number());
    if (r != 0 && ((r < 0) != (b.as_number() < 0)))
      r += b.as_number();
    return Value(r);
  }
  if (op == "**") {
    if (integers && integer_of(b) >= 0) {
      int64_t out = 1;
      for (int64_t i = 0; i < integer_of(b); ++i)
        out *= integer_of(a);
      return Value(out);
    }
    return Value(std::pow(a.as_number(), b.as_number()));
  }
  return unsupported();
}

/// Python's slice of a sequence of `size` items: the indices it selects.
std::vector<std::size_t> slice_indices(int64_t size, const Value& start, const Value& stop,
                                       const Value& step_value) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  int64_t step = given(step_value) ? integer_of(step_value) : 1;
  if (step == 0)
    throw TemplateError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (!given(v))
      return fallback;
    int64_t i = integer_of(v);
    if (i < 0)
      i += size;
    if (step > 0)
      return std::min(std::max<int64_t>(i, 0), size);
    return std::min(std::max<int64_t>(i, -1), size - 1);
  };
  int64_t begin = clamp(start, step > 0 ? 0 : size - 1);
  int64_t end = clamp(stop, step > 0 ? size : -1);
  std::vector<std::size_t> out;
  for (int64_t i = begin; step > 0 ? i < end : i > end; i += step)
    out.push_back(static_cast<std::size_t>(i));
  return out;
}

class Renderer {
 public:
  explicit Renderer(const Value::Dict& variables) {
    Frame globals;
    globals["range"] = Value::function("range", global_range);
    globals["namespace"] =
        Value::function("namespace", [](CallArgs& args) { return keyword_dict(args, true); });
    globals["dict"] =
        Value::function("dict", [](CallArgs& args) { return keyword_dict(args, false); });
    globals["raise_exception"] = Value::function("raise_exception", [](CallArgs& args) -> Value {
      const Value* message = arg(args, 0, "message");
      throw RaisedException(message ? message->to_str() : "raise_exception() was called");
    });
    globals["strftime_now"] = Value::function("strftime_now", global_strftime_now);
    for (const auto& [name, value] : variables)
      globals[name] = value;
    frames_.push_back(std::move(globals));
  }

  Flow exec(const Body& body, std::string& out) {
    for (const StmtPtr& stmt : body) {
      Flow flow = exec(*stmt, out);
      if (flow != Flow::Normal)
        return flow;
    }
    return Flow::Normal;
  }

 private:
  [[noreturn]] static void fail(const std::string& message, int line, int column) {
    throw TemplateError(message, line, column);
  }

  Value lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      auto it = frame->find(name);
      if (it != frame->end())
        return it->second;
    }
    return Value::undefined(name);
  }

  Flow exec(const Stmt& stmt, std::string& out) {
    switch (stmt.kind) {
    case Stmt::Kind::Text:
      out += stmt.text;
      return Flow::Normal;
    case Stmt::Kind::Output:
      out += eval(*stmt.expr).to_str();
      return Flow::Normal;
    case Stmt::Kind::If:
      for (const auto& [condition, body] : stmt.branches)
        if (eval(*condition).truthy())
          return exec(body, out);
      return exec(stmt.else_body, out);
    case Stmt::Kind::For:
      return exec_for(stmt, out);
    case Stmt::Kind::Set: {
      Value value = eval(*stmt.expr);
      if (!stmt.attribute.empty()) {
        Value target = lookup(stmt.targets[0]);
        if (!target.is_namespace())
          fail("cannot assign attribute on '" + stmt.targets[0] + "' (" + target.type_name() +
                   "): only namespace() objects take attributes",
               stmt.line, stmt.column);
        target.set(stmt.attribute, std::move(value));
      } else {
        bind(stmt.targets, value, frames_.back(), stmt);
      }
      return Flow::Normal;
    }
    case Stmt::Kind::SetBlock: {
      std::string captured;
      exec(stmt.body, captured);
      frames_.back()[stmt.targets[0]] = Value(std::move(captured));
      return Flow::Normal;
    }
    case Stmt::Kind::Macro:
      frames_.back()[stmt.name] = make_macro(stmt);
      return Flow::Normal;
    case Stmt::Kind::CallBlock: {
      Frame frame;
      frame["caller"] = make_macro(stmt);
      frames_.push_back(std::move(frame));
      Value result = eval(*stmt.expr);
      frames_.pop_back();
      out += result.to_str();
      return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
      std::string captured;
      exec(stmt.body, captured);
      out += apply_filter_chain(*stmt.expr, Value(std::move(captured))).to_str();
      return Flow::Normal;
    }
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
    }
    return Flow::Normal;
  }

  void bind(const std::vector<std::string>& targets, const Value& value, Frame& frame,
            const Stmt& at) {
    if (targets.size() == 1) {
      frame[targets[0]] = value;
      return;
    }
    Value::List items = iterate(value);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " +
               std::to_string(targets.size()) + " names",
           at.line, at.column);
    for (std::size_t i = 0; i < targets.size(); ++i)
      frame[targets[i]] = items[i];
  }

  Flow exec_for(const Stmt& stmt, std::string& out) {
    Value iterable = eval(*stmt.expr);
    if (iterable.is_none() || iterable.is_bool() || iterable.is_number())
      fail("'" + iterable.type_name() + "' object is not iterable", stmt.expr->line,
           stmt.expr->column);
    Value::List items = iterate(iterable);
    if (stmt.condition) {
      Value::List kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        bind(stmt.targets, item, frames_.back(), stmt);
        bool keep = eval(*stmt.condition).truthy();
        frames_.pop_back();
        if (keep)
          kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty())
      return exec(stmt.else_body, out);
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Frame frame;
      bind(stmt.targets, items[static_cast<std::size_t>(i)], frame, stmt);
      Value::Dict loop{
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(length - i)},
          {"revindex0", Value(length - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == length - 1)},
          {"length", Value(length)},
          {"depth", Value(int64_t{1})},
          {"depth0", Value(int64_t{0})},
          {"previtem",
           i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value::undefined("previtem")},
          {"nextitem",
           i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : Value::undefined("nextitem")},
      };
      loop.emplace_back(
          "cycle", Value::function("cycle", [i](CallArgs& args) {
            if (args.positional.empty())
              throw TemplateError("loop.cycle() needs arguments");
            return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
          }));
      frame["loop"] = Value::dict(std::move(loop));
      frames_.push_back(std::move(frame));
      Flow flow = exec(stmt.body, out);
      frames_.pop_back();
      if (flow == Flow::Break)
        break;
    }
    return Flow::Normal;
  }

  /// A macro (or a call block's `caller`) as a function. It sees the
  /// template's top-level names and its own parameters.
  Value make_macro(const Stmt& stmt) {
    const Stmt* macro = &stmt;
    return Value::function(stmt.name, [this, macro](CallArgs& args) {
      // Python stops runaway recursion near 1000 frames; stop before the stack does.
      if (macro_depth_ >= kMaxMacroDepth)
        fail("macro '" + macro->name + "' recursed more than " + std::to_string(kMaxMacroDepth) +
                 " levels deep",
             macro->line, macro->column);
      struct DepthGuard {
        int& depth;
        explicit DepthGuard(int& d)
          : depth(++d) {}
        ~DepthGuard() { --depth; }
      } guard(macro_depth_);
      Frame frame;
      for (std::size_t i = 0; i < macro->params.size(); ++i) {
        const std::string& param = macro->params[i];
        if (const Value* given = arg(args, i, param.c_str()))
          frame[param] = *given;
        else if (macro->defaults[i])
          frame[param] = eval(*macro->defaults[i]);
        else
          frame[param] = Value::undefined(param);
      }
      // What the parameters do not take: `varargs` and `kwargs`, as in Jinja.
      Value::List extra_positional;
      for (std::size_t i = macro->params.size(); i < args.positional.size(); ++i)
        extra_positional.push_back(args.positional[i]);
      frame["varargs"] = Value::list(std::move(extra_positional), true);
      Value::Dict extra_keywords;
      for (const auto& [key, value] : args.keyword)
        if (std::find(macro->params.begin(), macro->params.end(), key) == macro->params.end())
          extra_keywords.emplace_back(key, value);
      frame["kwargs"] = Value::dict(std::move(extra_keywords));
      // Inside {% call %}, the macro sees the block as `caller`.
      if (Value caller = lookup("caller"); caller.is_function() && !frame.count("caller"))
        frame["caller"] = caller;
      std::vector<Frame> saved;
      saved.swap(frames_);
      frames_.push_back(saved.front());
      if (macro->kind == Stmt::Kind::CallBlock) // a caller sees where it was called
        frames_ = saved;
      frames_.push_back(std::move(frame));
      std::string out;
      try {
        exec(macro->body, out);
      } catch (...) {
        frames_.swap(saved);
        throw;
      }
      if (macro->kind != Stmt::Kind::CallBlock) // top-level sets made by the macro stay
        saved.front() = frames_.front();
      frames_.swap(saved);
      return Value(std::move(out));
    });
  }

  Value attribute(const Value& object, const std::string& name) {
    if (object.is_dict()) {
      // Python's getattr comes first: message.items is the method.
      if (!object.is_namespace())
        if (auto method = bound_method(object, name))
          return *method;
      if (const Value* found = object.find(name))
        return *found;
      return Value::undefined(name);
    }
    if (auto method = bound_method(object, name))
      return *method;
    return Value::undefined(name);
  }

  Value subscript(const Value& object, const Value& key) {
    if (object.is_dict()) {
      if (key.is_string()) {
        if (const Value* found = object.find(key.as_string()))
          return *found;
        if (!object.is_namespace())
          if (auto method = bound_method(object, key.as_string()))
            return *method;
      }
      return Value::undefined(key.to_str());
    }
    if ((object.is_list() || object.is_string()) && is_integer_like(key)) {
      int64_t index = integer_of(key);
      if (object.is_list()) {
        auto size = static_cast<int64_t>(object.as_list().size());
        if (index < 0)
          index += size;
        if (index < 0 || index >= size)
          return Value::undefined(key.to_str());
        return object.as_list()[static_cast<std::size_t>(index)];
      }
      std::u32string cps = utf8_to_code_points(object.as_string());
      auto size = static_cast<int64_t>(cps.size());
      if (index < 0)
        index += size;
      if (index < 0 || index >= size)
        return Value::undefined(key.to_str());
      return Value(code_points_to_utf8(cps.substr(static_cast<std::size_t>(index), 1)));
    }
    if (key.is_string())
      return attribute(object, key.as_string());
    return Value::undefined(key.to_str());
  }

  CallArgs eval_args(const Expr& node) {
    CallArgs args;
    for (std::size_t i = 0; i < node.args.size(); ++i) {
      if (node.arg_names[i].empty())
        args.positional.push_back(eval(*node.args[i]));
      else
        args.keyword.emplace_back(node.arg_names[i], eval(*node.args[i]));
    }
    return args;
  }

  /// Runs `body`, giving errors without a position that of `node`.
  template <typename Body>
  Value positioned(const Expr& node, Body body) {
    try {
      return body();
    } catch (const RaisedException&) {
      throw;
    } catch (const TemplateError& e) {
      if (e.has_position())
        throw;
      fail(e.what(), node.line, node.column);
    }
  }

  /// A Filter node; `block_subject` is what a {% filter %} block rendered,
  /// standing in for the missing subject at the chain's start.
  Value apply_filter_chain(const Expr& filter, const Value& block_subject) {
    const Expr* inner = filter.operands[0].get();
    Value subject = !inner                              ? block_subject
                    : inner->kind == Expr::Kind::Filter ? apply_filter_chain(*inner, block_subject)
                                                        : eval(*inner);
    CallArgs args = eval_args(filter);
    return positioned(filter, [&] { return apply_filter(filter.name, subject, args); });
  }

  Value eval(const Expr& node) {
    switch (node.kind) {
    case Expr::Kind::Literal:
      return node.value;
    case Expr::Kind::Name:
      return lookup(node.name);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      Value::List items;
      for (const ExprPtr& item : node.operands)
        items.push_back(eval(*item));
      return Value::list(std::move(items), node.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Value out = Value::dict();
      for (std::size_t i = 0; i + 1 < node.operands.size(); i += 2)
        out.set(eval(*node.operands[i]).to_str(), eval(*node.operands[i + 1]));
      return out;
    }
    case Expr::Kind::GetAttr:
      return attribute(eval(*node.operands[0]), node.name);
    case Expr::Kind::GetItem:
      return subscript(eval(*node.operands[0]), eval(*node.operands[1]));
    case Expr::Kind::Slice: {
      Value object = eval(*node.operands[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (node.operands[static_cast<std::size_t>(i + 1)])
          parts[i] = eval(*node.operands[static_cast<std::size_t>(i + 1)]);
      for (const Value& part : parts)
        if (!part.is_undefined() && !part.is_none() && !is_integer_like(part))
          fail("slice indices must be integers", node.line, node.column);
      if (object.is_list()) {
        Value::List out;
        for (std::size_t i : slice_indices(static_cast<int64_t>(object.as_list().size()), parts[0],
                                           parts[1], parts[2]))
          out.push_back(object.as_list()[i]);
        return Value::list(std::move(out), object.is_tuple());
      }
      if (object.is_string()) {
        std::u32string cps = utf8_to_code_points(object.as_string()), out;
        for (std::size_t i :
             slice_indices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2]))
          out.push_back(cps[i]);
        return Value(code_points_to_utf8(out));
      }
      return Value::undefined("slice");
    }
    case Expr::Kind::Call: {
      Value callee = eval(*node.operands[0]);
      if (!callee.is_function()) {
        const Expr& target = *node.operands[0];
        std::string what = target.kind == Expr::Kind::Name      ? "'" + target.name + "'"
                           : target.kind == Expr::Kind::GetAttr ? "'" + target.name + "'"
                                                                : "the expression";
        fail(callee.is_undefined() ? what + " is undefined"
                                   : what + " (" + callee.type_name() + ") is not callable",
             node.line, node.column);
      }
      CallArgs args = eval_args(node);
      return positioned(node, [&] { return callee.as_function()(args); });
    }
    case Expr::Kind::Filter:
      return apply_filter_chain(node, Value());
    case Expr::Kind::Test: {
      Value subject = eval(*node.operands[0]);
      CallArgs args = eval_args(node);
      bool result =
          positioned(node, [&] { return Value(apply_test(node.name, subject, args)); }).as_bool();
      return Value(result != node.negated);
    }
    case Expr::Kind::Unary: {
      Value operand = eval(*node.operands[0]);
      if (node.name == "not")
        return Value(!operand.truthy());
      if (operand.is_int() || operand.is_bool())
        return Value(node.name == "-" ? -integer_of(operand) : integer_of(operand));
      if (operand.is_float())
        return Value(node.name == "-" ? -operand.as_number() : operand.as_number());
      fail("bad operand type for unary " + node.name + ": '" + operand.type_name() + "'", node.line,
           node.column);
    }
    case Expr::Kind::Binary: {
      Value left = eval(*node.operands[0]);
      if (node.name == "and")
        return left.truthy() ? eval(*node.operands[1]) : left;
      if (node.name == "or")
        return left.truthy() ? left : eval(*node.operands[1]);
      Value right = eval(*node.operands[1]);
      if (node.name == "~")
        return Value(left.to_str() + right.to_str());
      return positioned(node, [&] { return arithmetic(node.name, left, right); });
    }
    case Expr::Kind::Compare: {
      Value left = eval(*node.operands[0]);
      for (std::size_t i = 0; i < node.ops.size(); ++i) {
        Value right = eval(*node.operands[i + 1]);
        const std::string& op = node.ops[i];
        bool holds = positioned(node, [&] {
                       if (op == "==")
                         return Value(left == right);
                       if (op == "!=")
                         return Value(left != right);
                       if (op == "<")
                         return Value(less_than(left, right));
                       if (op == ">")
                         return Value(less_than(right, left));
                       if (op == "<=")
                         return Value(!less_than(right, left));
                       if (op == ">=")
                         return Value(!less_than(left, right));
                       CallArgs args;
                       args.positional.push_back(right);
                       bool in = apply_test("in", left, args);
                       return Value(op == "in" ? in : !in);
                     }).as_bool();
        if (!holds)
          return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::Conditional:
      if (eval(*node.operands[1]).truthy())
        return eval(*node.operands[0]);
      return node.operands[2] ? eval(*node.operands[2]) : Value::undefined("else");
    }
    return Value();
  }

  static constexpr int kMaxMacroDepth = 200;
  std::vector<Frame> frames_;
  int macro_depth_ = 0;
};

} // namespace

Template::Template(std::string_view source, const LexerOptions& options)
  : body_(std::make_shared<const Body>(parse(source, options))) {}

std::string Template::render(const Value::Dict& variables) const {
  Renderer renderer(variables);
  std::string out;
  renderer.exec(*body_, out);
  return out;
}

} // namespace caflm::jinja
