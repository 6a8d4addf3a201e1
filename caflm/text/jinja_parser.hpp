#pragma once

#include <string_view>

#include "caflm/text/jinja_ast.hpp"
#include "caflm/text/jinja_lexer.hpp"

namespace caflm::jinja {

/// Parses a template into statements with Jinja2's grammar and operator
/// precedence. Throws TemplateError naming the line and column at fault.
Body parse(std::string_view source, const LexerOptions& options = {});

} // namespace caflm::jinja
