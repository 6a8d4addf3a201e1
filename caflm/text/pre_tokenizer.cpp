#include "caflm/text/pre_tokenizer.hpp"

#include "caflm/text/unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>

namespace caflm {

namespace {

using unicode::char_class;

// ---------------------------------------------------------------------------
// The pieces of the text, as lengths in code points, and one regex step over
// them. A step cuts every piece on its own: a regex never sees past the piece
// it runs on, so (?!\S) and $ hold at a piece's end.

/// One piece of the text as a regex sees it.
class Piece {
 public:
  Piece(const std::vector<uint32_t>& code_points, const std::vector<uint16_t>& classes,
        size_t begin, size_t end, std::vector<size_t>& out)
    : code_points_(code_points)
    , classes_(classes)
    , begin_(begin)
    , end_(end)
    , word_begin_(begin)
    , out_(out) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  bool inside(size_t pos) const { return pos < end_; }
  /// Positions past the piece's end hold nothing: no code point, no class.
  uint32_t at(size_t pos) const { return inside(pos) ? code_points_[pos] : kPastEnd; }
  uint16_t class_at(size_t pos) const { return inside(pos) ? classes_[pos] : 0; }
  bool letter_at(size_t pos) const { return (class_at(pos) & unicode::kLetter) != 0; }
  bool number_at(size_t pos) const { return (class_at(pos) & unicode::kNumber) != 0; }
  bool whitespace_at(size_t pos) const { return (class_at(pos) & unicode::kWhitespace) != 0; }
  /// [^\s\p{L}\p{N}]: any code point of the piece that is none of those.
  bool other_at(size_t pos) const {
    return inside(pos) &&
           (class_at(pos) & (unicode::kLetter | unicode::kNumber | unicode::kWhitespace)) == 0;
  }
  bool newline_at(size_t pos) const { return at(pos) == '\r' || at(pos) == '\n'; }

  /// Ends the current word at `pos` (nothing if it would be empty).
  void end_word(size_t pos) {
    if (pos > word_begin_) {
      out_.push_back(pos - word_begin_);
    }
    word_begin_ = pos;
  }

  static constexpr uint32_t kPastEnd = 0xFFFFFFFF;

 private:
  const std::vector<uint32_t>& code_points_;
  const std::vector<uint16_t>& classes_;
  size_t begin_;
  size_t end_;
  size_t word_begin_;
  std::vector<size_t>& out_;
};

/// Length of the contraction 's|'t|'re|'ve|'m|'ll|'d at `pos` (which holds an
/// apostrophe), 0 if none; `any_case` makes the letters case-insensitive (only
/// ASCII letters lower-case to these, so ASCII folding is exact).
size_t contraction_length(const Piece& p, size_t pos, bool any_case) {
  const auto lower = [any_case](uint32_t c) {
    return any_case && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
  };
  const uint32_t first = lower(p.at(pos + 1));
  if (first == 's' || first == 't' || first == 'm' || first == 'd') {
    return 2;
  }
  const uint32_t second = lower(p.at(pos + 2));
  if ((first == 'r' && second == 'e') || (first == 'v' && second == 'e') ||
      (first == 'l' && second == 'l')) {
    return 3;
  }
  return 0;
}

/// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
/// Alternatives are tried in order at each position, as the regex does. A lone
/// whitespace before a non-space matches nothing and is left as a piece of its
/// own, which is what a \s+ alternative would give too.
void split_gpt2(Piece& p) {
  size_t pos = p.begin();
  while (pos < p.end()) {
    const uint32_t c = p.at(pos);
    if (c == '\'') {
      if (const size_t length = contraction_length(p, pos, false)) {
        pos += length;
        p.end_word(pos);
        continue;
      }
    }
    // The optional space before a letter, number or other run.
    const size_t head = c == ' ' ? pos + 1 : pos;
    if (p.letter_at(head)) {
      for (pos = head; p.letter_at(pos); ++pos) {
      }
      p.end_word(pos);
      continue;
    }
    if (p.number_at(head)) {
      for (pos = head; p.number_at(pos); ++pos) {
      }
      p.end_word(pos);
      continue;
    }
    if (p.other_at(head)) {
      for (pos = head; p.other_at(pos); ++pos) {
      }
      p.end_word(pos);
      continue;
    }
    // Only whitespace is left here (c is a space or has no other class).
    size_t n_whitespace = 0;
    while (p.whitespace_at(pos + n_whitespace)) {
      ++n_whitespace;
    }
    if (n_whitespace > 1 && p.inside(pos + n_whitespace)) {
      // \s+(?!\S): the last space stays to prefix the word that follows.
      pos += n_whitespace - 1;
    } else {
      pos += std::max<size_t>(n_whitespace, 1);
    }
    p.end_word(pos);
  }
}

/// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
///  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(Piece& p, size_t max_digits) {
  size_t pos = p.begin();
  while (pos < p.end()) {
    const uint32_t c = p.at(pos);
    if (c == '\'') {
      if (const size_t length = contraction_length(p, pos, true)) {
        pos += length;
        p.end_word(pos);
        continue;
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : one leading character of any other kind allowed.
    if (!p.newline_at(pos) && !p.number_at(pos) && (p.letter_at(pos) || p.letter_at(pos + 1))) {
      for (++pos; p.letter_at(pos); ++pos) {
      }
      p.end_word(pos);
      continue;
    }
    if (p.number_at(pos)) {
      for (size_t n = 0; n < max_digits && p.number_at(pos); ++n) {
        ++pos;
      }
      p.end_word(pos);
      continue;
    }
    const size_t head = c == ' ' ? pos + 1 : pos;
    if (p.other_at(head)) {
      for (pos = head; p.other_at(pos); ++pos) {
      }
      while (p.newline_at(pos)) {
        ++pos;
      }
      p.end_word(pos);
      continue;
    }
    // Only whitespace is left here. \s*[\r\n]+ ends at the run's last newline.
    size_t n_whitespace = 0;
    std::optional<size_t> after_last_newline;
    while (p.whitespace_at(pos + n_whitespace)) {
      if (p.newline_at(pos + n_whitespace)) {
        after_last_newline = pos + n_whitespace + 1;
      }
      ++n_whitespace;
    }
    if (after_last_newline) {
      pos = *after_last_newline;
    } else if (n_whitespace > 1 && p.inside(pos + n_whitespace)) {
      pos += n_whitespace - 1; // \s+(?!\S), as in split_gpt2
    } else {
      pos += std::max<size_t>(n_whitespace, 1);
    }
    p.end_word(pos);
  }
}

// ---------------------------------------------------------------------------
// The single-class regexes of the other pre-tokenizers: \s?X+, X, X+, X{n},
// \s+$. One greedy class needs no backtracking beyond the optional space.

/// Whether a code point is in a regex's bracket class. `c` is the code point as
/// the regex sees it (see ClassRegex::whitespace_as_vertical_tab).
using ClassTest = bool (*)(uint32_t c, uint16_t classes);

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

bool in_ranges(uint32_t c, const CodePointRange* ranges, size_t n) {
  const CodePointRange* end = ranges + n;
  const CodePointRange* it = std::upper_bound(
      ranges, end, c, [](uint32_t value, const CodePointRange& r) { return value < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

struct ClassRegex {
  ClassTest test;
  bool optional_leading_whitespace; ///< \s? before the class
  size_t min_count;
  size_t max_count; ///< SIZE_MAX for + and *
  /// Ends with $: the match must reach the piece's end (used without the
  /// optional leading whitespace only).
  bool at_end;
  /// llama.cpp runs regexes without \p{..} on the code points, but first turns
  /// every non-ASCII whitespace into U+000B, so bracket ranges that span such
  /// spaces (the CJK one spans U+3000) do not take them.
  bool whitespace_as_vertical_tab;
};

/// ClassRegex::max_count of X+.
constexpr size_t kUnbounded = SIZE_MAX;

// [\r\n]
bool is_newline(uint32_t c, uint16_t) {
  return c == '\r' || c == '\n';
}
// \p{N}
bool is_number(uint32_t, uint16_t classes) {
  return (classes & unicode::kNumber) != 0;
}
// \p{L}
bool is_letter(uint32_t, uint16_t classes) {
  return (classes & unicode::kLetter) != 0;
}
// \p{P}
bool is_punctuation(uint32_t, uint16_t classes) {
  return (classes & unicode::kPunctuation) != 0;
}
// [0-9]
bool is_ascii_digit(uint32_t c, uint16_t) {
  return c >= '0' && c <= '9';
}
// [\p{P}\$\+<=>\^~\|]
bool is_default_punctuation(uint32_t c, uint16_t classes) {
  return is_punctuation(c, classes) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
         c == '^' || c == '~' || c == '|';
}
// [\p{P}\$\+<=>\^~\|`]
bool is_falcon_punctuation(uint32_t c, uint16_t classes) {
  return is_default_punctuation(c, classes) || c == '`';
}

// DeepSeek LLM's letter class, written out in its regex as ranges of cased
// letters (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, full-width
// Latin, Deseret, Osage, Old Hungarian, Warang Citi, Adlam).
constexpr CodePointRange kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
bool is_deepseek_letter(uint32_t c, uint16_t) {
  return in_ranges(c, kDeepseekLetters, std::size(kDeepseekLetters));
}

// [!-/:-~！-／：-～‘-‟　-。]: ASCII and full-width punctuation, quotes, and
// U+3000..U+3002 (U+3000 itself never matches: it is seen as U+000B).
constexpr CodePointRange kDeepseekPunctuation[] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
bool is_deepseek_punctuation(uint32_t c, uint16_t) {
  return in_ranges(c, kDeepseekPunctuation, std::size(kDeepseekPunctuation));
}

// [一-龥ࠀ-一가-퟿]: U+0800..U+9FA5 (the two ranges overlap at U+4E00) and Hangul
// syllables with U+D7B0..U+D7FF.
constexpr CodePointRange kDeepseekCjk[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};
bool is_deepseek_cjk(uint32_t c, uint16_t) {
  return in_ranges(c, kDeepseekCjk, std::size(kDeepseekCjk));
}

/// Length of the match of `regex` starting at `pos`, 0 if none.
size_t match_at(const ClassRegex& regex, const Piece& p, const std::vector<uint32_t>& seen,
                size_t pos) {
  const auto run_from = [&](size_t start) {
    size_t n = 0;
    while (n < regex.max_count && p.inside(start + n) &&
           regex.test(seen[start + n], p.class_at(start + n))) {
      ++n;
    }
    if (n < regex.min_count) {
      return size_t{0};
    }
    return n;
  };
  // \s? is greedy: with the whitespace first, then without it.
  if (regex.optional_leading_whitespace && p.whitespace_at(pos)) {
    if (const size_t n = run_from(pos + 1)) {
      return n + 1;
    }
  }
  return run_from(pos);
}

/// Cuts the piece into the leftmost-first matches of `regex` and the text
/// between them, as std::regex_iterator walks it.
void split_class(const ClassRegex& regex, Piece& p, const std::vector<uint32_t>& seen) {
  size_t pos = p.begin();
  if (regex.at_end) {
    // Only a run that reaches the piece's end can match, and the leftmost start
    // is where that run begins: find it backwards instead of trying each start.
    size_t start = p.end();
    while (start > pos && regex.test(seen[start - 1], p.class_at(start - 1))) {
      --start;
    }
    if (p.end() - start >= std::max<size_t>(regex.min_count, 1)) {
      p.end_word(start);
    }
    p.end_word(p.end());
    return;
  }
  while (pos < p.end()) {
    if (const size_t n = match_at(regex, p, seen, pos)) {
      p.end_word(pos); // the text before the match
      pos += n;
      p.end_word(pos);
    } else {
      ++pos;
    }
  }
  p.end_word(p.end());
}

// ---------------------------------------------------------------------------

enum class StepKind { Gpt2, Llama3, Qwen2, Class };

struct Step {
  StepKind kind;
  ClassRegex regex; // for StepKind::Class
};

constexpr ClassRegex kNoRegex{nullptr, false, 0, 0, false, false};

constexpr Step class_step(ClassTest test, bool optional_leading_whitespace, size_t min_count,
                          size_t max_count, bool uses_categories, bool at_end = false) {
  return Step{StepKind::Class, ClassRegex{test, optional_leading_whitespace, min_count, max_count,
                                          at_end, !uses_categories}};
}

constexpr Step kGpt2Step{StepKind::Gpt2, kNoRegex};

/// llama.cpp's regex list for each pre-tokenizer (llama-vocab.cpp).
std::vector<Step> steps_of(PreTokenizer pre_tokenizer) {
  switch (pre_tokenizer) {
  case PreTokenizer::Default:
    return {class_step(is_default_punctuation, false, 1, kUnbounded, true), kGpt2Step,
            class_step(is_number, false, 1, kUnbounded, true),
            class_step(is_ascii_digit, false, 3, 3, false)};
  case PreTokenizer::Gpt2:
    return {kGpt2Step};
  case PreTokenizer::Llama3:
    return {Step{StepKind::Llama3, kNoRegex}};
  case PreTokenizer::Qwen2:
    return {Step{StepKind::Qwen2, kNoRegex}};
  case PreTokenizer::DigitsThenGpt2:
    return {class_step(is_number, false, 1, 1, true), kGpt2Step};
  case PreTokenizer::Falcon:
    return {class_step(is_falcon_punctuation, false, 1, kUnbounded, true), kGpt2Step,
            class_step(is_ascii_digit, false, 3, 3, false)};
  case PreTokenizer::DeepseekLlm:
    return {
        class_step(is_newline, false, 1, 1, false),
        class_step(is_deepseek_letter, true, 1, kUnbounded, false),
        class_step(is_deepseek_punctuation, true, 1, kUnbounded, false),
        // \s+$
        class_step([](uint32_t, uint16_t classes) { return (classes & unicode::kWhitespace) != 0; },
                   false, 1, kUnbounded, false, true),
        class_step(is_deepseek_cjk, false, 1, kUnbounded, false),
        class_step(is_number, false, 1, kUnbounded, true)};
  case PreTokenizer::DeepseekCoder:
    return {class_step(is_newline, false, 1, 1, false),
            class_step(is_letter, true, 1, kUnbounded, true),
            class_step(is_punctuation, true, 1, kUnbounded, true),
            class_step(is_deepseek_cjk, false, 1, kUnbounded, false),
            class_step(is_number, false, 1, 1, true)};
  }
  return {kGpt2Step};
}

struct NamedPreTokenizer {
  std::string_view name;
  PreTokenizer pre_tokenizer;
  bool llama3_family;
};

// tokenizer.ggml.pre names as llama.cpp groups them (llama_vocab::impl::load).
constexpr NamedPreTokenizer kNames[] = {
    {"default", PreTokenizer::Default, false},
    {"llama3", PreTokenizer::Llama3, true},
    {"llama-v3", PreTokenizer::Llama3, true},
    {"llama-bpe", PreTokenizer::Llama3, true},
    {"falcon3", PreTokenizer::Llama3, true},
    {"falcon-h1", PreTokenizer::Llama3, true},
    {"pixtral", PreTokenizer::Llama3, true},
    {"midm-2.0", PreTokenizer::Llama3, true},
    {"lfm2", PreTokenizer::Llama3, true},
    {"dbrx", PreTokenizer::Llama3, false},
    {"smaug-bpe", PreTokenizer::Llama3, false},
    {"chatglm-bpe", PreTokenizer::Llama3, false},
    {"glm4", PreTokenizer::Llama3, false},
    {"qwen2", PreTokenizer::Qwen2, false},
    {"deepseek-r1-qwen", PreTokenizer::Qwen2, false},
    {"kormo", PreTokenizer::Qwen2, false},
    {"stablelm2", PreTokenizer::Qwen2, false},
    {"megrez", PreTokenizer::Qwen2, false},
    {"hunyuan", PreTokenizer::Qwen2, false},
    {"grok-2", PreTokenizer::Qwen2, false},
    {"deepseek-llm", PreTokenizer::DeepseekLlm, false},
    {"deepseek-coder", PreTokenizer::DeepseekCoder, false},
    {"falcon", PreTokenizer::Falcon, false},
    {"starcoder", PreTokenizer::DigitsThenGpt2, false},
    {"refact", PreTokenizer::DigitsThenGpt2, false},
    {"command-r", PreTokenizer::DigitsThenGpt2, false},
    {"smollm", PreTokenizer::DigitsThenGpt2, false},
    {"codeshell", PreTokenizer::DigitsThenGpt2, false},
    {"exaone", PreTokenizer::DigitsThenGpt2, false},
    {"minerva-7b", PreTokenizer::DigitsThenGpt2, false},
    {"gpt-2", PreTokenizer::Gpt2, false},
    {"phi-2", PreTokenizer::Gpt2, false},
    {"mpt", PreTokenizer::Gpt2, false},
    // Not a name llama.cpp knows (it would fall back to "default"), but GPT-NeoX's
    // own tokenizer is byte-level with GPT-2's regex, as MPT's is.
    {"gpt-neox", PreTokenizer::Gpt2, false},
    {"olmo", PreTokenizer::Gpt2, false},
    {"jais", PreTokenizer::Gpt2, false},
    {"trillion", PreTokenizer::Gpt2, false},
    {"granite-docling", PreTokenizer::Gpt2, false},
    {"exaone4", PreTokenizer::Gpt2, false},
    {"jina-es", PreTokenizer::Gpt2, false},
    {"jina-de", PreTokenizer::Gpt2, false},
    {"jina-v1-en", PreTokenizer::Gpt2, false},
    {"jina-v2-es", PreTokenizer::Gpt2, false},
    {"jina-v2-de", PreTokenizer::Gpt2, false},
    {"jina-v2-code", PreTokenizer::Gpt2, false},
    {"roberta-bpe", PreTokenizer::Gpt2, false},
    {"gigachat", PreTokenizer::Gpt2, false},
    {"a.x-4.0", PreTokenizer::Gpt2, false},
    {"mellum", PreTokenizer::Gpt2, false},
};

} // namespace

PreTokenizerChoice pre_tokenizer_from_name(std::string_view name) {
  for (const NamedPreTokenizer& named : kNames) {
    if (named.name == name) {
      return PreTokenizerChoice{named.pre_tokenizer, true, named.llama3_family};
    }
  }
  return PreTokenizerChoice{PreTokenizer::Default, false, false};
}

std::string_view pre_tokenizer_name(PreTokenizer pre_tokenizer) {
  switch (pre_tokenizer) {
  case PreTokenizer::Default:
    return "default";
  case PreTokenizer::Gpt2:
    return "gpt-2";
  case PreTokenizer::Llama3:
    return "llama-bpe";
  case PreTokenizer::Qwen2:
    return "qwen2";
  case PreTokenizer::DigitsThenGpt2:
    return "starcoder";
  case PreTokenizer::Falcon:
    return "falcon";
  case PreTokenizer::DeepseekLlm:
    return "deepseek-llm";
  case PreTokenizer::DeepseekCoder:
    return "deepseek-coder";
  }
  return "?";
}

std::vector<size_t> split_words(PreTokenizer pre_tokenizer,
                                const std::vector<uint32_t>& code_points) {
  const size_t n = code_points.size();
  std::vector<uint16_t> classes(n);
  std::vector<uint32_t> seen_vt(code_points); // non-ASCII whitespace as U+000B
  for (size_t i = 0; i < n; ++i) {
    classes[i] = char_class(code_points[i]);
    if (code_points[i] > 0x7F && (classes[i] & unicode::kWhitespace) != 0) {
      seen_vt[i] = 0x0B;
    }
  }
  std::vector<size_t> pieces;
  if (n > 0) {
    pieces.push_back(n);
  }
  std::vector<size_t> next;
  for (const Step& step : steps_of(pre_tokenizer)) {
    next.clear();
    size_t begin = 0;
    for (size_t length : pieces) {
      Piece piece(code_points, classes, begin, begin + length, next);
      switch (step.kind) {
      case StepKind::Gpt2:
        split_gpt2(piece);
        break;
      case StepKind::Llama3:
        split_llama3(piece, 3);
        break;
      case StepKind::Qwen2:
        split_llama3(piece, 1);
        break;
      case StepKind::Class:
        split_class(step.regex, piece,
                    step.regex.whitespace_as_vertical_tab ? seen_vt : code_points);
        break;
      }
      begin += length;
    }
    std::swap(pieces, next);
  }
  return pieces;
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
