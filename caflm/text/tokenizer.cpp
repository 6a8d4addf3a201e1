#include "caflm/text/tokenizer.hpp"

#include "caflm/text/pre_tokenizer.hpp"
#include "caflm/text/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <queue>
#include <stdexcept>
#include <utility>

namespace caflm {

namespace {

// ---------------------------------------------------------------------------
// Merging, shared by both kinds: symbols are byte ranges of one text, linked
// into a list; merging a pair grows the left symbol over the right one.

struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t length; // 0 once merged into its left neighbour
};

/// The text split into UTF-8 characters (by lead byte only, as llama.cpp does).
std::vector<Symbol> split_characters(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length =
        std::min(unicode::utf8_sequence_length(text[offset]), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(
        Symbol{index - 1, offset + length == text.size() ? -1 : index + 1, offset, length});
    offset += length;
  }
  return symbols;
}

void merge_into_left(std::vector<Symbol>& symbols, int left) {
  Symbol& left_symbol = symbols[left];
  Symbol& right_symbol = symbols[left_symbol.next];
  left_symbol.length += right_symbol.length;
  right_symbol.length = 0;
  left_symbol.next = right_symbol.next;
  if (right_symbol.next >= 0) {
    symbols[right_symbol.next].prev = left;
  }
}

/// Offers every adjacent pair to `try_add_bigram` (which queues the pairs that
/// may merge), then merges the best queued pair and offers the merged symbol's
/// new pairs, until the queue is empty. The two kinds differ only in how they
/// rank pairs (the queue's order) and which pairs they queue.
template <typename BigramQueue, typename TryAddBigram>
void merge_best_pairs(std::vector<Symbol>& symbols, BigramQueue& queue,
                      const TryAddBigram& try_add_bigram) {
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
    try_add_bigram(i - 1, i);
  }
  while (!queue.empty()) {
    const auto bigram = queue.top();
    queue.pop();
    const Symbol& left = symbols[bigram.left];
    const Symbol& right = symbols[bigram.right];
    // Stale: one side has been merged into something else since.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;
    }
    merge_into_left(symbols, bigram.left);
    try_add_bigram(symbols[bigram.left].prev, bigram.left);
    try_add_bigram(bigram.left, symbols[bigram.left].next);
  }
}

/// SentencePiece BPE (llama.cpp's llm_tokenizer_spm): repeatedly merge the
/// adjacent pair whose joined text is the highest-scoring token (leftmost on
/// ties); symbols that are not tokens fall back to byte tokens.
void encode_spm(const Vocabulary& vocabulary, std::string_view text, std::vector<TokenId>& out) {
  struct Bigram {
    int left;
    int right;
    float score;
    size_t length;
  };
  const auto ranks_below = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(ranks_below)> queue(ranks_below);

  std::vector<Symbol> symbols = split_characters(text);
  const auto try_add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) {
      return;
    }
    const std::string_view joined =
        text.substr(symbols[left].offset, symbols[left].length + symbols[right].length);
    if (const std::optional<TokenId> id = vocabulary.find(joined)) {
      queue.push(Bigram{left, right, vocabulary.token_score(*id), joined.size()});
    }
  };
  merge_best_pairs(symbols, queue, try_add_bigram);

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    if (const std::optional<TokenId> id = vocabulary.find(piece)) {
      out.push_back(*id);
      continue;
    }
    // Every merged symbol is a token, so this is a single character the
    // vocabulary lacks: spell it in bytes.
    for (char byte : piece) {
      const std::optional<TokenId> id = vocabulary.byte_token(static_cast<uint8_t>(byte));
      if (!id) {
        throw std::runtime_error(fmt::format(
            "cannot encode byte 0x{:02X}: the vocabulary has no byte token and no unknown token",
            static_cast<uint8_t>(byte)));
      }
      out.push_back(*id);
    }
  }
}

/// Byte-level BPE for one pre-tokenized word (already in the byte-level
/// alphabet; llama.cpp's llm_tokenizer_bpe_session): merge the adjacent pair
/// with the lowest merge rank (leftmost on ties) until none is left.
void encode_bpe_word(const Vocabulary& vocabulary, std::string_view word,
                     std::vector<TokenId>& out) {
  if (vocabulary.ignore_merges()) {
    if (const std::optional<TokenId> id = vocabulary.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  struct Bigram {
    int left;
    int right;
    uint32_t rank;
    size_t length;
  };
  const auto ranks_below = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(ranks_below)> queue(ranks_below);

  std::vector<Symbol> symbols = split_characters(word);
  const auto text_of = [&](int index) {
    return word.substr(symbols[index].offset, symbols[index].length);
  };
  const auto try_add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) {
      return;
    }
    if (const std::optional<uint32_t> rank = vocabulary.merge_rank(text_of(left), text_of(right))) {
      queue.push(Bigram{left, right, *rank, symbols[left].length + symbols[right].length});
    }
  };
  merge_best_pairs(symbols, queue, try_add_bigram);

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text_of(i);
    if (const std::optional<TokenId> id = vocabulary.find(piece)) {
      out.push_back(*id);
      continue;
    }
    // A merge produced text that is no token: llama.cpp keeps whichever single
    // bytes of it are tokens and drops the rest.
    for (char byte : piece) {
      if (const std::optional<TokenId> id = vocabulary.find(std::string_view(&byte, 1))) {
        out.push_back(*id);
      }
    }
  }
}

/// UTF-8 of each byte's stand-in in GPT-2's byte-level alphabet.
const std::array<std::string, 256>& byte_level_utf8() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> utf8;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      unicode::append_utf8(utf8[byte], unicode::byte_to_byte_level(static_cast<uint8_t>(byte)));
    }
    return utf8;
  }();
  return table;
}

void encode_bpe(const Vocabulary& vocabulary, std::string_view text, std::vector<TokenId>& out) {
  const std::vector<uint32_t> code_points = unicode::decode_utf8_lenient(text);
  const std::vector<size_t> word_lengths = split_words(vocabulary.pre_tokenizer(), code_points);
  const std::array<std::string, 256>& byte_level = byte_level_utf8();
  std::string utf8;
  std::string word;
  size_t begin = 0;
  for (size_t length : word_lengths) {
    utf8.clear();
    for (size_t i = begin; i < begin + length; ++i) {
      unicode::append_utf8(utf8, code_points[i]);
    }
    begin += length;
    word.clear();
    for (char byte : utf8) {
      word += byte_level[static_cast<uint8_t>(byte)];
    }
    encode_bpe_word(vocabulary, word, out);
  }
}

// ---------------------------------------------------------------------------

/// A stretch of the input: plain text, or one special token found in it.
struct Fragment {
  size_t offset;
  size_t length;
  std::optional<TokenId> token;
};

/// The whitespace llama.cpp strips next to lstrip/rstrip tokens (C isspace).
bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/// Cuts `text` at occurrences of special tokens, longest tokens first (llama.cpp's
/// tokenizer_st_partition). User-defined tokens are always cut out; control and
/// unknown ones only with `parse_special`. A token with lstrip (rstrip) also
/// takes the ASCII whitespace before (after) it within the same text fragment.
std::vector<Fragment> partition(const Vocabulary& vocabulary, std::string_view text,
                                bool parse_special) {
  std::vector<Fragment> fragments;
  if (!text.empty()) {
    fragments.push_back(Fragment{0, text.size(), std::nullopt});
  }
  std::vector<Fragment> cut;
  for (TokenId special : vocabulary.special_tokens()) {
    if (!parse_special && vocabulary.token_type(special) != TokenType::UserDefined) {
      continue;
    }
    const std::string_view needle = vocabulary.token_text(special);
    const bool lstrip = vocabulary.token_lstrip(special);
    const bool rstrip = vocabulary.token_rstrip(special);
    cut.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token) {
        cut.push_back(fragment);
        continue;
      }
      size_t pos = fragment.offset;
      const size_t end = fragment.offset + fragment.length;
      for (size_t match = text.substr(pos, end - pos).find(needle); match != std::string_view::npos;
           match = text.substr(pos, end - pos).find(needle)) {
        match += pos;
        size_t left_end = match;
        while (lstrip && left_end > pos && is_ascii_space(text[left_end - 1])) {
          --left_end;
        }
        if (left_end > pos) {
          cut.push_back(Fragment{pos, left_end - pos, std::nullopt});
        }
        cut.push_back(Fragment{match, needle.size(), special});
        pos = match + needle.size();
        while (rstrip && pos < end && is_ascii_space(text[pos])) {
          ++pos;
        }
      }
      if (pos < end) {
        cut.push_back(Fragment{pos, end - pos, std::nullopt});
      }
    }
    std::swap(fragments, cut);
  }
  return fragments;
}

/// The bytes `id` stands for; see Tokenizer::token_to_piece.
std::string make_piece(const Vocabulary& vocabulary, TokenId id) {
  const std::string_view text = vocabulary.token_text(id);
  switch (vocabulary.token_type(id)) {
  case TokenType::Normal:
    break;
  case TokenType::UserDefined:
    return std::string(text);
  case TokenType::Byte:
    if (vocabulary.kind() == TokenizerKind::Bpe) {
      return ""; // llama.cpp gives byte-typed BPE tokens no text
    }
    if (text.size() == 6 && text.substr(0, 3) == "<0x" && text[5] == '>') {
      const std::string hex(text.substr(3, 2));
      char* end = nullptr;
      const long byte = std::strtol(hex.c_str(), &end, 16);
      if (end == hex.c_str() + 2) {
        return std::string(1, static_cast<char>(byte));
      }
    }
    throw std::runtime_error(
        fmt::format("byte token {} has the text '{}' instead of <0xHH>", id, text));
  case TokenType::Control:
  case TokenType::Unknown:
  case TokenType::Unused:
  case TokenType::Undefined:
    return "";
  }

  std::string piece;
  piece.reserve(text.size());
  if (vocabulary.kind() == TokenizerKind::Spm) {
    static constexpr std::string_view kEscapedSpace = "\xE2\x96\x81"; // U+2581
    for (size_t pos = 0; pos < text.size();) {
      if (text.substr(pos, kEscapedSpace.size()) == kEscapedSpace) {
        piece.push_back(' ');
        pos += kEscapedSpace.size();
      } else {
        piece.push_back(text[pos++]);
      }
    }
    return piece;
  }
  for (uint32_t code_point : unicode::decode_utf8_lenient(text)) {
    if (const std::optional<uint8_t> byte = unicode::byte_level_to_byte(code_point)) {
      piece.push_back(static_cast<char>(*byte));
    } else {
      // Not from the byte-level alphabet (a hand-added token): keep it as text.
      unicode::append_utf8(piece, code_point);
    }
  }
  return piece;
}

} // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Vocabulary> vocabulary)
  : vocabulary_(std::move(vocabulary)) {
  if (!vocabulary_) {
    throw std::invalid_argument("Tokenizer needs a vocabulary");
  }
  pieces_.reserve(vocabulary_->size());
  for (TokenId id = 0; id < vocabulary_->size(); ++id) {
    pieces_.push_back(make_piece(*vocabulary_, id));
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos) const {
  return encode(text, add_bos, false);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 2 + 2);
  if (add_bos && vocabulary_->bos()) {
    out.push_back(*vocabulary_->bos());
  }
  encode_into(text, parse_special, out);
  return out;
}

std::vector<TokenId> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  const Vocabulary& vocabulary = *vocabulary_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 2 + 2);
  // The constructor of Vocabulary makes sure these tokens exist when asked for.
  if (add_special && vocabulary.add_bos()) {
    out.push_back(*vocabulary.bos());
  }
  encode_into(text, parse_special, out);
  if (add_special && vocabulary.add_eos()) {
    out.push_back(*vocabulary.eos());
  }
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool parse_special,
                            std::vector<TokenId>& out) const {
  const Vocabulary& vocabulary = *vocabulary_;
  // SPM puts a space before the text and after every special token in it.
  bool after_special = true;
  std::string escaped;
  for (const Fragment& fragment : partition(vocabulary, text, parse_special)) {
    if (fragment.token) {
      out.push_back(*fragment.token);
      after_special = true;
      continue;
    }
    const std::string_view fragment_text = text.substr(fragment.offset, fragment.length);
    if (vocabulary.kind() == TokenizerKind::Bpe) {
      encode_bpe(vocabulary, fragment_text, out);
      continue;
    }
    // SentencePiece sees spaces as U+2581.
    escaped.clear();
    if (vocabulary.add_space_prefix() && after_special) {
      escaped += "\xE2\x96\x81";
    }
    for (char c : fragment_text) {
      if (c == ' ') {
        escaped += "\xE2\x96\x81";
      } else {
        escaped.push_back(c);
      }
    }
    encode_spm(vocabulary, escaped, out);
    after_special = false;
  }
}

std::string_view Tokenizer::piece(TokenId id) const {
  if (id >= pieces_.size()) {
    throw std::out_of_range(
        fmt::format("token id {} is outside the vocabulary of {} tokens", id, pieces_.size()));
  }
  return pieces_[id];
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool starts_text) const {
  std::string bytes;
  for (TokenId id : ids) {
    bytes += piece(id);
  }
  if (starts_text && vocabulary_->add_space_prefix() && !bytes.empty() && bytes.front() == ' ') {
    bytes.erase(0, 1);
  }
  return unicode::sanitize_utf8(bytes);
}

} // namespace caflm
