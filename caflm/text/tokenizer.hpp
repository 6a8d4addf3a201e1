#pragma once

#include "caflm/text/pre_tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace caflm {

/// Text to token ids and back, following llama.cpp's tokenizers exactly (its
/// tokenizer test vectors are reproduced id for id). Immutable and thread-safe.
class Tokenizer {
 public:
  /// Throws std::invalid_argument for a null vocabulary.
  explicit Tokenizer(std::shared_ptr<const Vocabulary> vocabulary);

  const Vocabulary& vocabulary() const { return *vocabulary_; }
  const std::shared_ptr<const Vocabulary>& shared_vocabulary() const { return vocabulary_; }

  /// Token ids of `text`, starting with BOS when `add_bos` is set and the
  /// vocabulary has one. Texts of control tokens (such as "<s>") are ordinary
  /// text here; user-defined tokens are always matched, as in llama.cpp.
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const;
  /// As above; with `parse_special`, texts of control and unknown tokens in the
  /// input become those tokens (and take the whitespace next to them that their
  /// lstrip/rstrip attributes say).
  std::vector<TokenId> encode(std::string_view text, bool add_bos, bool parse_special) const;

  /// llama_tokenize(): with `add_special`, BOS first and EOS last as the
  /// vocabulary's add_bos() and add_eos() say (tokenizer.ggml.add_bos_token /
  /// add_eos_token, else llama.cpp's defaults for the tokenizer model).
  std::vector<TokenId> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  /// The raw bytes a token stands for (SPM: U+2581 as a space, <0xAB> as that
  /// byte; BPE: the byte-level alphabet undone). Control, unknown and unused
  /// tokens give "". A piece may be part of a UTF-8 character.
  std::string token_to_piece(TokenId id) const { return std::string(piece(id)); }
  /// token_to_piece() without the copy; valid as long as this tokenizer.
  std::string_view piece(TokenId id) const;

  /// The text of `ids` as valid UTF-8: pieces joined, invalid or truncated byte
  /// sequences replaced by U+FFFD. With `starts_text` (ids encode a whole text,
  /// as encode() makes them), the space an SPM vocabulary puts before the text
  /// is removed; a continuation (tokens generated after a prompt) keeps it.
  std::string decode(const std::vector<TokenId>& ids, bool starts_text = true) const;

 private:
  /// Appends the ids of `text` (no BOS or EOS) to `out`.
  void encode_into(std::string_view text, bool parse_special, std::vector<TokenId>& out) const;

  std::shared_ptr<const Vocabulary> vocabulary_;
  std::vector<std::string> pieces_; // piece of every token, computed once
};

} // namespace caflm
