#include "caflm/text/chat_prompt.hpp"

#include "caflm/text/tokenizer.hpp"

namespace caflm {

std::vector<TokenId> encode_chat_prompt(const Tokenizer& tokenizer, std::string_view rendered) {
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  const bool add_bos = vocabulary.add_bos() && vocabulary.bos().has_value();
  if (add_bos) {
    const std::string_view bos_text = vocabulary.token_text(*vocabulary.bos());
    if (!bos_text.empty() && rendered.substr(0, bos_text.size()) == bos_text)
      rendered.remove_prefix(bos_text.size());
  }
  return tokenizer.encode(rendered, add_bos, /*parse_special=*/true);
}

} // namespace caflm
