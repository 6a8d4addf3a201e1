#pragma once

#include "caflm/text/tokenizer.hpp"

#include <string>

namespace caflm {

/// Turns a stream of token ids into text deltas that are always whole UTF-8
/// characters, holding back the bytes of a character split across tokens (an
/// emoji spelled in byte tokens, say). The deltas of push() and flush() joined
/// equal Tokenizer::decode() of all the ids with the same `starts_text`.
/// One per stream; not thread-safe.
class StreamingDetokenizer {
 public:
  /// `tokenizer` must outlive this object. `starts_text`: the first id begins a
  /// text, so the space an SPM vocabulary puts before a text is dropped; leave it
  /// false for tokens generated after a prompt.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool starts_text = false);

  /// The text completed by `id`; empty while a character is still incomplete.
  /// Bytes that can never form a character come out as U+FFFD at once.
  std::string push(TokenId id);

  /// The end of the stream: a character left incomplete comes out as U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;     // bytes of an incomplete character
  bool strip_space_prefix_; // until the first byte arrives
};

} // namespace caflm
