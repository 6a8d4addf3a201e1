#pragma once

#include <string_view>
#include <vector>

#include "caflm/text/vocabulary.hpp"

namespace caflm {

class Tokenizer;

/// The token ids of a prompt rendered by a chat template. Special tokens in
/// the text (<|im_start|>, [INST], ...) become those tokens. BOS (and EOS)
/// are added as the vocabulary says, and a BOS the template wrote itself
/// (many hub templates start with `{{ bos_token }}`) is not doubled:
/// llama.cpp drops the template's copy the same way.
std::vector<TokenId> encode_chat_prompt(const Tokenizer& tokenizer, std::string_view rendered);

} // namespace caflm
