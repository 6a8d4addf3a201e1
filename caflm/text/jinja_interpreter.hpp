#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "caflm/text/jinja_ast.hpp"
#include "caflm/text/jinja_lexer.hpp"
#include "caflm/text/jinja_value.hpp"

namespace caflm::jinja {

/// A parsed Jinja template, rendered as Jinja2 does in the environment Hugging
/// Face builds for chat templates: trim_blocks and lstrip_blocks (by
/// default), loop controls, undefined values that print as nothing, and the
/// globals `range`, `namespace`, `dict`, `raise_exception` and
/// `strftime_now`. Parsing happens once; render() may run many times.
class Template {
 public:
  /// Throws TemplateError (with line and column) for a template that does
  /// not parse.
  explicit Template(std::string_view source, const LexerOptions& options = {});

  /// Renders with `variables` as the template's context; a variable hides a
  /// global of the same name (a fixed `strftime_now`, for instance). Throws
  /// RaisedException for `raise_exception(...)`, TemplateError otherwise.
  std::string render(const Value::Dict& variables) const;

 private:
  std::shared_ptr<const Body> body_;
};

} // namespace caflm::jinja
