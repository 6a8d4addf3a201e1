#pragma once

#include <string_view>
#include <vector>

namespace caflm {

/// A chat template caflm carries for models whose files have none, or for
/// `--chat-template NAME`: the family's published Jinja source.
struct BuiltinChatTemplate {
  std::string_view name;
  std::string_view origin; ///< the model whose template this is
  std::string_view source;
};

/// All built-in templates, in a stable order.
const std::vector<BuiltinChatTemplate>& builtin_chat_templates();

} // namespace caflm
