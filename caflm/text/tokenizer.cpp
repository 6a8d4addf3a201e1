#include "caflm/text/tokenizer.hpp"

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
// Pre-tokenizers. The regexes (see PreTokenizer) are hand-coded over code
// points, mirroring llama.cpp's own hand-coded versions branch for branch, as
// std::regex has no \p{L}. Alternatives are tried in regex order; the first
// that matches at the current position gives the next word.

// Set in a class byte for positions inside the segment being split; positions
// past its end have no class at all, which is how a regex sees its input end.
constexpr uint8_t kInside = 0x80;
constexpr uint32_t kPastEnd = 0xFFFFFFFF;

/// One stretch of code points split into words, independently of its neighbours.
class Segment {
 public:
  Segment(const std::vector<uint32_t>& code_points, const std::vector<uint8_t>& classes,
          size_t begin, size_t end, std::vector<size_t>& word_lengths)
    : code_points_(code_points)
    , classes_(classes)
    , begin_(begin)
    , end_(end)
    , word_begin_(begin)
    , word_lengths_(word_lengths) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  uint32_t at(size_t pos) const { return pos < end_ ? code_points_[pos] : kPastEnd; }
  uint8_t class_at(size_t pos) const { return pos < end_ ? (classes_[pos] | kInside) : 0; }
  bool letter_at(size_t pos) const { return (class_at(pos) & unicode::kLetter) != 0; }
  bool number_at(size_t pos) const { return (class_at(pos) & unicode::kNumber) != 0; }
  bool whitespace_at(size_t pos) const { return (class_at(pos) & unicode::kWhitespace) != 0; }
  /// [^\s\p{L}\p{N}]
  bool other_at(size_t pos) const {
    const uint8_t c = class_at(pos);
    return (c & kInside) != 0 &&
           (c & (unicode::kLetter | unicode::kNumber | unicode::kWhitespace)) == 0;
  }
  bool newline_at(size_t pos) const { return at(pos) == '\r' || at(pos) == '\n'; }

  /// Ends the current word at `pos` (nothing if it would be empty).
  void end_word(size_t pos) {
    if (pos > word_begin_) {
      word_lengths_.push_back(pos - word_begin_);
    }
    word_begin_ = pos;
  }

 private:
  const std::vector<uint32_t>& code_points_;
  const std::vector<uint8_t>& classes_;
  size_t begin_;
  size_t end_;
  size_t word_begin_;
  std::vector<size_t>& word_lengths_;
};

/// Length of the contraction 's|'t|'re|'ve|'m|'ll|'d at `pos` (which holds an
/// apostrophe), 0 if none; `any_case` makes the letters case-insensitive.
size_t contraction_length(const Segment& s, size_t pos, bool any_case) {
  const auto lower = [any_case](uint32_t c) {
    return any_case && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
  };
  const uint32_t first = lower(s.at(pos + 1));
  if (first == 's' || first == 't' || first == 'm' || first == 'd') {
    return 2;
  }
  const uint32_t second = lower(s.at(pos + 2));
  if ((first == 'r' && second == 'e') || (first == 'v' && second == 'e') ||
      (first == 'l' && second == 'l')) {
    return 3;
  }
  return 0;
}

/// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(Segment& s) {
  size_t pos = s.begin();
  while (pos < s.end()) {
    const uint32_t c = s.at(pos);
    if (c == '\'') {
      if (const size_t length = contraction_length(s, pos, false)) {
        pos += length;
        s.end_word(pos);
        continue;
      }
    }
    // The optional space before a letter, number or other run.
    const size_t head = c == ' ' ? pos + 1 : pos;
    if (s.letter_at(head)) {
      for (pos = head; s.letter_at(pos); ++pos) {
      }
      s.end_word(pos);
      continue;
    }
    if (s.number_at(head)) {
      for (pos = head; s.number_at(pos); ++pos) {
      }
      s.end_word(pos);
      continue;
    }
    if (s.other_at(head)) {
      for (pos = head; s.other_at(pos); ++pos) {
      }
      s.end_word(pos);
      continue;
    }
    // Only whitespace is left here (c is a space or has no other class).
    size_t n_whitespace = 0;
    while (s.whitespace_at(pos + n_whitespace)) {
      ++n_whitespace;
    }
    if (n_whitespace > 1 && pos + n_whitespace < s.end()) {
      // \s+(?!\S): the last space stays to prefix the word that follows.
      pos += n_whitespace - 1;
    } else {
      pos += n_whitespace;
    }
    s.end_word(pos);
  }
}

/// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
///  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(Segment& s, size_t max_digits) {
  size_t pos = s.begin();
  while (pos < s.end()) {
    const uint32_t c = s.at(pos);
    if (c == '\'') {
      if (const size_t length = contraction_length(s, pos, true)) {
        pos += length;
        s.end_word(pos);
        continue;
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : one leading character of any other kind allowed.
    if (!s.newline_at(pos) && !s.number_at(pos) && (s.letter_at(pos) || s.letter_at(pos + 1))) {
      for (++pos; s.letter_at(pos); ++pos) {
      }
      s.end_word(pos);
      continue;
    }
    if (s.number_at(pos)) {
      for (size_t n = 0; n < max_digits && s.number_at(pos); ++n) {
        ++pos;
      }
      s.end_word(pos);
      continue;
    }
    const size_t head = c == ' ' ? pos + 1 : pos;
    if (s.other_at(head)) {
      for (pos = head; s.other_at(pos); ++pos) {
      }
      while (s.newline_at(pos)) {
        ++pos;
      }
      s.end_word(pos);
      continue;
    }
    // Only whitespace is left here. \s*[\r\n]+ ends at the run's last newline.
    size_t n_whitespace = 0;
    std::optional<size_t> after_last_newline;
    while (s.whitespace_at(pos + n_whitespace)) {
      if (s.newline_at(pos + n_whitespace)) {
        after_last_newline = pos + n_whitespace + 1;
      }
      ++n_whitespace;
    }
    if (after_last_newline) {
      pos = *after_last_newline;
    } else if (n_whitespace > 1 && pos + n_whitespace < s.end()) {
      pos += n_whitespace - 1; // \s+(?!\S), as in split_gpt2
    } else {
      pos += n_whitespace;
    }
    s.end_word(pos);
  }
}

/// Word lengths, in code points, of `code_points` under `pre_tokenizer`.
std::vector<size_t> split_words(PreTokenizer pre_tokenizer,
                                const std::vector<uint32_t>& code_points) {
  std::vector<uint8_t> classes(code_points.size());
  for (size_t i = 0; i < code_points.size(); ++i) {
    classes[i] = unicode::char_class(code_points[i]);
  }
  std::vector<size_t> word_lengths;
  const size_t n = code_points.size();
  switch (pre_tokenizer) {
  case PreTokenizer::Gpt2: {
    Segment segment(code_points, classes, 0, n, word_lengths);
    split_gpt2(segment);
    break;
  }
  case PreTokenizer::Llama3:
  case PreTokenizer::Qwen2: {
    Segment segment(code_points, classes, 0, n, word_lengths);
    split_llama3(segment, pre_tokenizer == PreTokenizer::Llama3 ? 3 : 1);
    break;
  }
  case PreTokenizer::DigitsThenGpt2:
    for (size_t begin = 0; begin < n;) {
      if ((classes[begin] & unicode::kNumber) != 0) {
        word_lengths.push_back(1);
        ++begin;
        continue;
      }
      size_t end = begin;
      while (end < n && (classes[end] & unicode::kNumber) == 0) {
        ++end;
      }
      Segment segment(code_points, classes, begin, end, word_lengths);
      split_gpt2(segment);
      begin = end;
    }
    break;
  }
  return word_lengths;
}

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

/// Cuts `text` at occurrences of special tokens, longest tokens first (llama.cpp's
/// tokenizer_st_partition). User-defined tokens are always cut out; control and
/// unknown ones only with `parse_special`.
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
        if (match > pos) {
          cut.push_back(Fragment{pos, match - pos, std::nullopt});
        }
        cut.push_back(Fragment{match, needle.size(), special});
        pos = match + needle.size();
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
  const Vocabulary& vocabulary = *vocabulary_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 2 + 2);
  if (add_bos && vocabulary.bos()) {
    out.push_back(*vocabulary.bos());
  }
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
  return out;
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

std::vector<std::string> pre_tokenize(PreTokenizer pre_tokenizer, std::string_view text) {
  const std::vector<uint32_t> code_points = unicode::decode_utf8_lenient(text);
  std::vector<std::string> words;
  size_t begin = 0;
  for (size_t length : split_words(pre_tokenizer, code_points)) {
    std::string& word = words.emplace_back();
    for (size_t i = begin; i < begin + length; ++i) {
      unicode::append_utf8(word, code_points[i]);
    }
    begin += length;
  }
  return words;
}

} // namespace caflm
