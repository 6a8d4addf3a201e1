#include "caflm/text/jinja_parser.hpp"

#include <cstdlib>
#include <initializer_list>

namespace caflm::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens)
    : tokens_(std::move(tokens)) {}

  Body parse_template() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  const Token& peek(std::size_t ahead = 0) const {
    std::size_t i = pos_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1)
      ++pos_;
    return t;
  }
  bool is_op(const char* op, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Operator && peek(ahead).text == op;
  }
  bool is_name(const char* name, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op))
      return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name))
      return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message, const Token& at) const {
    throw TemplateError(message, at.line, at.column);
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
    case TokenKind::End:
      return "the end of the template";
    case TokenKind::BlockEnd:
      return "'%}'";
    case TokenKind::VariableEnd:
      return "'}}'";
    case TokenKind::String:
      return "a string";
    default:
      return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op))
      fail(std::string("expected '") + op + "', found " + describe(peek()), peek());
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::Name)
      fail("expected a name, found " + describe(peek()), peek());
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::BlockEnd)
      fail("expected '%}', found " + describe(peek()), peek());
    next();
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    return std::make_unique<Expr>(kind, at.line, at.column);
  }

  // ---- statements --------------------------------------------------------

  /// Statements up to one of `end_tags` (its name goes to `end_tag`, and the
  /// parser stands after the tag's name), or the end of the template.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string& end_tag) {
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
      case TokenKind::End:
        if (end_tags.size() != 0) // the last tag is the one that closes the block
          fail(std::string("missing {% ") + *(end_tags.end() - 1) + " %}", t);
        return body;
      case TokenKind::Text: {
        auto stmt = std::make_unique<Stmt>(Stmt::Kind::Text, t.line, t.column);
        stmt->text = next().text;
        body.push_back(std::move(stmt));
        break;
      }
      case TokenKind::VariableBegin: {
        next();
        auto stmt = std::make_unique<Stmt>(Stmt::Kind::Output, t.line, t.column);
        stmt->expr = parse_expression();
        if (peek().kind != TokenKind::VariableEnd)
          fail("expected '}}', found " + describe(peek()), peek());
        next();
        body.push_back(std::move(stmt));
        break;
      }
      case TokenKind::BlockBegin: {
        const Token& tag = peek(1);
        if (tag.kind != TokenKind::Name)
          fail("expected a tag name after '{%'", tag);
        for (const char* end : end_tags) {
          if (tag.text == end) {
            next();
            next();
            end_tag = tag.text;
            return body;
          }
        }
        next();
        body.push_back(parse_statement());
        break;
      }
      default:
        fail("unexpected " + describe(t), t);
      }
    }
  }

  StmtPtr parse_statement() {
    const Token tag = next();
    const std::string& name = tag.text;
    if (name == "if")
      return parse_if(tag);
    if (name == "for")
      return parse_for(tag);
    if (name == "set")
      return parse_set(tag);
    if (name == "macro")
      return parse_macro(tag);
    if (name == "call")
      return parse_call_block(tag);
    if (name == "filter")
      return parse_filter_block(tag);
    if (name == "break" || name == "continue") {
      expect_block_end();
      return std::make_unique<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue,
                                    tag.line, tag.column);
    }
    if (name == "generation") {
      // Hugging Face's marker for assistant text: it renders its body as is.
      expect_block_end();
      auto stmt = std::make_unique<Stmt>(Stmt::Kind::If, tag.line, tag.column);
      std::string end_tag;
      auto always = make(Expr::Kind::Literal, tag);
      always->value = Value(true);
      stmt->branches.emplace_back(std::move(always), parse_body({"endgeneration"}, end_tag));
      expect_block_end();
      return stmt;
    }
    fail("unknown tag '" + name + "'", tag);
  }

  StmtPtr parse_if(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::If, tag.line, tag.column);
    while (true) {
      ExprPtr condition = parse_expression();
      expect_block_end();
      std::string end_tag;
      Body body = parse_body({"elif", "else", "endif"}, end_tag);
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      if (end_tag == "elif")
        continue;
      if (end_tag == "else") {
        expect_block_end();
        stmt->else_body = parse_body({"endif"}, end_tag);
      }
      expect_block_end();
      return stmt;
    }
  }

  StmtPtr parse_for(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::For, tag.line, tag.column);
    bool parenthesized = skip_op("(");
    do {
      stmt->targets.push_back(expect_name());
    } while (skip_op(","));
    if (parenthesized)
      expect_op(")");
    if (!skip_name("in"))
      fail("expected 'in' in {% for %}, found " + describe(peek()), peek());
    stmt->expr = parse_tuple(false);
    if (skip_name("if"))
      stmt->condition = parse_expression();
    if (skip_name("recursive"))
      fail("recursive loops are not supported", tag);
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"else", "endfor"}, end_tag);
    if (end_tag == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endfor"}, end_tag);
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_set(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::Set, tag.line, tag.column);
    stmt->targets.push_back(expect_name());
    if (skip_op(".")) {
      stmt->attribute = expect_name();
    } else {
      while (skip_op(","))
        stmt->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      stmt->expr = parse_tuple(true);
      expect_block_end();
      return stmt;
    }
    if (!stmt->attribute.empty() || stmt->targets.size() != 1)
      fail("expected '=' in {% set %}", peek());
    stmt->kind = Stmt::Kind::SetBlock;
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endset"}, end_tag);
    expect_block_end();
    return stmt;
  }

  void parse_params(Stmt& stmt) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!stmt.params.empty())
        expect_op(",");
      if (skip_op(")"))
        break;
      stmt.params.push_back(expect_name());
      stmt.defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
  }

  StmtPtr parse_macro(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::Macro, tag.line, tag.column);
    stmt->name = expect_name();
    parse_params(*stmt);
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endmacro"}, end_tag);
    if (peek().kind == TokenKind::Name) // {% endmacro name %}
      next();
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_call_block(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::CallBlock, tag.line, tag.column);
    if (is_op("("))
      parse_params(*stmt);
    stmt->expr = parse_expression();
    if (stmt->expr->kind != Expr::Kind::Call)
      fail("expected a call in {% call %}", tag);
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endcall"}, end_tag);
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block(const Token& tag) {
    auto stmt = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, tag.line, tag.column);
    ExprPtr chain;
    do {
      chain = parse_filter(std::move(chain));
    } while (skip_op("|"));
    stmt->expr = std::move(chain);
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endfilter"}, end_tag);
    expect_block_end();
    return stmt;
  }

  // ---- expressions, lowest precedence first ------------------------------

  /// An expression, or several separated by commas (a tuple without parens).
  ExprPtr parse_tuple(bool with_condexpr) {
    const Token& at = peek();
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(","))
      return first;
    auto tuple = make(Expr::Kind::Tuple, at);
    tuple->operands.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TokenKind::BlockEnd || peek().kind == TokenKind::VariableEnd)
        break;
      tuple->operands.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto cond = make(Expr::Kind::Conditional, at);
      cond->operands.push_back(std::move(expr));
      cond->operands.push_back(parse_or());
      cond->operands.push_back(skip_name("else") ? parse_expression() : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr left, ExprPtr right) {
    auto node = make(Expr::Kind::Binary, at);
    node->name = op;
    node->operands.push_back(std::move(left));
    node->operands.push_back(std::move(right));
    return node;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token at = next();
      left = binary(at, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token at = next();
      left = binary(at, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token at = next();
      auto node = make(Expr::Kind::Unary, at);
      node->name = "not";
      node->operands.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token at = peek();
    ExprPtr first = parse_math1();
    ExprPtr compare;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::Operator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!compare) {
        compare = make(Expr::Kind::Compare, at);
        compare->operands.push_back(std::move(first));
      }
      compare->ops.push_back(op);
      compare->operands.push_back(parse_math1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = next();
      left = binary(at, at.text, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token at = next();
      left = binary(at, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = next();
      left = binary(at, at.text, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token at = next();
      left = binary(at, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token at = next();
      node = make(Expr::Kind::Unary, at);
      node->name = at.text;
      node->operands.push_back(parse_unary(false));
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token t = next();
    switch (t.kind) {
    case TokenKind::Name: {
      auto node = make(Expr::Kind::Literal, t);
      if (t.text == "true" || t.text == "True")
        node->value = Value(true);
      else if (t.text == "false" || t.text == "False")
        node->value = Value(false);
      else if (t.text == "none" || t.text == "None")
        node->value = Value::none();
      else {
        node->kind = Expr::Kind::Name;
        node->name = t.text;
      }
      return node;
    }
    case TokenKind::String: {
      std::string text = t.text;
      while (peek().kind == TokenKind::String) // adjacent strings join
        text += next().text;
      auto node = make(Expr::Kind::Literal, t);
      node->value = Value(std::move(text));
      return node;
    }
    case TokenKind::Integer: {
      auto node = make(Expr::Kind::Literal, t);
      node->value = Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10)));
      return node;
    }
    case TokenKind::Float: {
      auto node = make(Expr::Kind::Literal, t);
      node->value = Value(std::strtod(t.text.c_str(), nullptr));
      return node;
    }
    case TokenKind::Operator:
      if (t.text == "(") {
        if (skip_op(")"))
          return make(Expr::Kind::Tuple, t);
        ExprPtr inner = parse_expression();
        if (is_op(",")) {
          auto tuple = make(Expr::Kind::Tuple, t);
          tuple->operands.push_back(std::move(inner));
          while (skip_op(",") && !is_op(")"))
            tuple->operands.push_back(parse_expression());
          inner = std::move(tuple);
        }
        expect_op(")");
        return inner;
      }
      if (t.text == "[") {
        auto list = make(Expr::Kind::List, t);
        while (!skip_op("]")) {
          if (!list->operands.empty())
            expect_op(",");
          if (skip_op("]"))
            break;
          list->operands.push_back(parse_expression());
        }
        return list;
      }
      if (t.text == "{") {
        auto dict = make(Expr::Kind::Dict, t);
        while (!skip_op("}")) {
          if (!dict->operands.empty())
            expect_op(",");
          if (skip_op("}"))
            break;
          dict->operands.push_back(parse_expression());
          expect_op(":");
          dict->operands.push_back(parse_expression());
        }
        return dict;
      }
      break;
    default:
      break;
    }
    fail("unexpected " + describe(t), t);
  }

  void parse_call_args(Expr& node) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!node.args.empty())
        expect_op(",");
      if (skip_op(")"))
        break;
      if (peek().kind == TokenKind::Name && is_op("=", 1)) {
        node.arg_names.push_back(next().text);
        next();
      } else {
        node.arg_names.emplace_back();
      }
      node.args.push_back(parse_expression());
    }
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const Token at = next();
        const Token& t = peek();
        if (t.kind == TokenKind::Integer) { // foo.0 is foo[0]
          auto item = make(Expr::Kind::GetItem, at);
          auto index = make(Expr::Kind::Literal, t);
          index->value =
              Value(static_cast<int64_t>(std::strtoll(next().text.c_str(), nullptr, 10)));
          item->operands.push_back(std::move(node));
          item->operands.push_back(std::move(index));
          node = std::move(item);
          continue;
        }
        auto attr = make(Expr::Kind::GetAttr, at);
        attr->name = expect_name();
        attr->operands.push_back(std::move(node));
        node = std::move(attr);
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::Call, peek());
        call->operands.push_back(std::move(node));
        parse_call_args(*call);
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token at = next(); // [
    ExprPtr parts[3];
    bool is_slice = false;
    for (int part = 0; part < 3; ++part) {
      if (!is_op(":") && !is_op("]"))
        parts[part] = parse_expression();
      if (part < 2 && skip_op(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    auto result = make(is_slice ? Expr::Kind::Slice : Expr::Kind::GetItem, at);
    result->operands.push_back(std::move(node));
    if (!is_slice && !parts[0])
      fail("empty subscript", at);
    for (int part = 0; part < (is_slice ? 3 : 1); ++part)
      result->operands.push_back(std::move(parts[part]));
    return result;
  }

  /// `| name(args)` applied to `subject` (null inside {% filter %}).
  ExprPtr parse_filter(ExprPtr subject) {
    const Token& at = peek();
    auto filter = make(Expr::Kind::Filter, at);
    filter->name = expect_name();
    while (skip_op("."))
      filter->name += "." + expect_name();
    filter->operands.push_back(std::move(subject));
    if (is_op("("))
      parse_call_args(*filter);
    return filter;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (skip_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        const Token at = next();
        auto test = make(Expr::Kind::Test, at);
        test->negated = skip_name("not");
        test->name = expect_name();
        while (skip_op("."))
          test->name += "." + expect_name();
        test->operands.push_back(std::move(node));
        const Token& t = peek();
        if (is_op("(")) {
          parse_call_args(*test);
        } else if ((t.kind == TokenKind::Name || t.kind == TokenKind::String ||
                    t.kind == TokenKind::Integer || t.kind == TokenKind::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          // `x is divisibleby 3`: one argument without parentheses.
          test->arg_names.emplace_back();
          test->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(test);
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::Call, peek());
        call->operands.push_back(std::move(node));
        parse_call_args(*call);
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
};

} // namespace

Body parse(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse_template();
}

} // namespace caflm::jinja
