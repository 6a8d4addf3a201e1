#include "caflm/text/detokenizer.hpp"

#include "caflm/text/unicode.hpp"

namespace caflm {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool starts_text)
  : tokenizer_(&tokenizer)
  , strip_space_prefix_(starts_text && tokenizer.vocabulary().add_space_prefix()) {}

std::string StreamingDetokenizer::push(TokenId id) {
  std::string_view piece = tokenizer_->piece(id);
  if (strip_space_prefix_ && !piece.empty()) {
    if (piece.front() == ' ') {
      piece.remove_prefix(1);
    }
    strip_space_prefix_ = false;
  }
  pending_.append(piece);

  // Emit everything up to an incomplete character at the end; the rules are
  // those of unicode::sanitize_utf8, applied as bytes arrive, so the result is
  // the same as decoding everything at once.
  std::string text;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const std::string_view rest = std::string_view(pending_).substr(pos);
    const unicode::Utf8Prefix prefix = unicode::read_utf8_prefix(rest);
    if (prefix.kind == unicode::Utf8Prefix::Kind::Incomplete) {
      break;
    }
    if (prefix.kind == unicode::Utf8Prefix::Kind::Valid) {
      text.append(rest.substr(0, prefix.length));
    } else {
      unicode::append_utf8(text, unicode::kReplacementCharacter);
    }
    pos += prefix.length;
  }
  pending_.erase(0, pos);
  return text;
}

std::string StreamingDetokenizer::flush() {
  std::string text = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return text;
}

} // namespace caflm
