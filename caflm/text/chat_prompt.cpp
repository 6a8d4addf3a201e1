#include "caflm/text/chat_prompt.hpp"

#include "caflm/text/tokenizer.hpp"

namespace caflm {

std::vector<TokenId> encode_chat_prompt(const Tokenizer& tokenizer, std::string_view rendered) {
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  if (vocabulary.add_bos() && vocabulary.bos()) {
    const std::string_view bos_text = vocabulary.token_text(*vocabulary.bos());
    if (!bos_text.empty() && rendered.substr(0, bos_text.size()) == bos_text)
      rendered.remove_prefix(bos_text.size());
  }
  return tokenizer.tokenize(rendered, /*add_special=*/true, /*parse_special=*/true);
}

} // namespace caflm
