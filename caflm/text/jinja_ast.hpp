#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "caflm/text/jinja_value.hpp"

namespace caflm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/// An expression node. Which fields matter depends on `kind`.
struct Expr {
  enum class Kind {
    Literal,     ///< value
    Name,        ///< name
    List,        ///< operands: the items
    Tuple,       ///< operands: the items
    Dict,        ///< operands: key, value, key, value, ...
    GetAttr,     ///< operands[0].name
    GetItem,     ///< operands[0][operands[1]]
    Slice,       ///< operands[0][operands[1]:operands[2]:operands[3]], parts may be null
    Call,        ///< operands[0](args)
    Filter,      ///< operands[0] | name(args); operands[0] is null in {% filter %}
    Test,        ///< operands[0] is [not] name(args)
    Unary,       ///< name ("-", "+", "not") applied to operands[0]
    Binary,      ///< operands[0] name operands[1]: arithmetic, "~", "and", "or"
    Compare,     ///< operands[0] ops[0] operands[1] ops[1] ... (chained as Python does)
    Conditional, ///< operands[0] if operands[1] else operands[2] (may be null)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<ExprPtr> args;          ///< Call, Filter, Test arguments
  std::vector<std::string> arg_names; ///< one per arg: "" for positional, else the keyword
  std::vector<std::string> ops;       ///< Compare: "==", "in", "not in", ...
  bool negated = false;               ///< Test: `is not`

  Expr(Kind k, int l, int c)
    : kind(k)
    , line(l)
    , column(c) {}
};

/// A statement node. Which fields matter depends on `kind`.
struct Stmt {
  enum class Kind {
    Text,        ///< text
    Output,      ///< {{ expr }}
    If,          ///< branches (condition, body); else_body
    For,         ///< for targets in expr [if condition]: body; else_body
    Set,         ///< set targets = expr, or set targets[0].attribute = expr
    SetBlock,    ///< set targets[0]: body, captured
    Macro,       ///< macro name(params = defaults): body
    CallBlock,   ///< call expr: body is `caller()`
    FilterBlock, ///< filter expr (a Filter chain with no subject): body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attribute; ///< Set: `ns.attribute`
  std::string name;      ///< Macro
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults; ///< one per param, null without a default

  Stmt(Kind k, int l, int c)
    : kind(k)
    , line(l)
    , column(c) {}
};

} // namespace caflm::jinja
