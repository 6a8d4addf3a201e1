// Pre-tokenizers (tokenizer.ggml.pre), Unicode classes, special tokens in text
// with their strip attributes, and BOS/EOS handling.
//
// Every expected split below is derived by hand from the regexes llama.cpp lists
// for the name (llama-vocab.cpp), applied as unicode_regex_split applies them:
// each regex cuts every piece the previous ones produced into its leftmost-first
// matches and the text between them, both kept. The comments walk through why.

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/text/pre_tokenizer.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/unicode.hpp"
#include "caflm/text/vocabulary.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

using namespace caflm;

namespace {

using Words = std::vector<std::string>;

const std::string kReplacement = "\xEF\xBF\xBD"; // U+FFFD

/// A GGUF image holding `writer`'s metadata, opened from memory.
struct GgufImage {
  explicit GgufImage(const GgufWriter& writer)
    : bytes(writer.to_bytes()) {}
  GgufFile open() const { return GgufFile::from_memory(bytes.data(), bytes.size()); }
  std::vector<uint8_t> bytes;
};

} // namespace

TEST_CASE("tokenizer.ggml.pre names map to llama.cpp's regex lists", "[pre_tokenizer]") {
  const auto pre_of = [](const char* name) { return pre_tokenizer_from_name(name).pre_tokenizer; };
  for (const char* name : {"llama3", "llama-v3", "llama-bpe"}) {
    INFO(name);
    CHECK(pre_of(name) == PreTokenizer::Llama3);
    CHECK(pre_tokenizer_from_name(name).llama3_family);
  }
  CHECK(pre_of("qwen2") == PreTokenizer::Qwen2);
  CHECK_FALSE(pre_tokenizer_from_name("qwen2").llama3_family);
  for (const char* name : {"smollm", "starcoder", "refact"}) {
    INFO(name);
    CHECK(pre_of(name) == PreTokenizer::DigitsThenGpt2);
  }
  for (const char* name : {"gpt-2", "mpt", "gpt-neox"}) {
    INFO(name);
    CHECK(pre_of(name) == PreTokenizer::Gpt2);
  }
  CHECK(pre_of("deepseek-llm") == PreTokenizer::DeepseekLlm);
  CHECK(pre_of("deepseek-coder") == PreTokenizer::DeepseekCoder);
  CHECK(pre_of("falcon") == PreTokenizer::Falcon);
  CHECK(pre_of("default") == PreTokenizer::Default);
  CHECK(pre_tokenizer_from_name("default").known);
  CHECK(pre_of("no-such-model") == PreTokenizer::Default);
  CHECK_FALSE(pre_tokenizer_from_name("no-such-model").known);
  CHECK_FALSE(pre_tokenizer_from_name("").known);
  CHECK(pre_tokenizer_name(PreTokenizer::Default) == "default");
}

TEST_CASE("Unicode classes come from the character database", "[pre_tokenizer]") {
  using namespace unicode;
  CHECK(std::string(unicode_version()) == "15.0.0");
  CHECK(char_class('A') == kLetter);
  CHECK(char_class(0x00E9) == kLetter); // é
  CHECK(char_class(0x4E00) == kLetter); // 一, Lo
  CHECK(char_class(0x01C5) == kLetter); // ǅ, Lt
  CHECK(char_class('7') == kNumber);
  CHECK(char_class(0x0663) == kNumber); // Arabic-Indic three, Nd
  CHECK(char_class(0x00B2) == kNumber); // superscript two, No
  CHECK(char_class(0x2164) == kNumber); // Roman numeral five, Nl
  CHECK(char_class(0x0301) == kMark);   // combining acute accent
  CHECK(char_class('!') == kPunctuation);
  CHECK(char_class(0x3001) == kPunctuation); // ideographic comma
  CHECK(char_class('+') == kSymbol);
  CHECK(char_class('~') == kSymbol);
  CHECK(char_class(0x1F600) == kSymbol); // 😀
  CHECK(char_class(' ') == (kSeparator | kWhitespace));
  CHECK(char_class(0x00A0) == (kSeparator | kWhitespace)); // no-break space
  CHECK(char_class(0x3000) == (kSeparator | kWhitespace)); // ideographic space
  CHECK(char_class('\n') == (kControl | kWhitespace));
  CHECK(char_class(0x0085) == (kControl | kWhitespace)); // next line
  CHECK(char_class(0x001C) == kControl);                 // a separator to Python, not White_Space
  CHECK(char_class(0x200B) == kControl);                 // zero-width space: Cf, not White_Space
  CHECK(char_class(0xD800) == kControl);                 // surrogate
  CHECK(char_class(0xE000) == kControl);                 // private use
  CHECK(char_class(0x0378) == kUndefined);               // unassigned
  CHECK(char_class(0x10FFFF) == kUndefined);
  CHECK(char_class(0x110000) == kUndefined);
}

TEST_CASE("gpt-2: contractions, space-led runs, whitespace before words", "[pre_tokenizer]") {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  // Contractions are case-sensitive: "'RE" is not one, so the apostrophe is an
  // "other" run and "RE" a letter run. Each space joins the word after it.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "I'm can't WE'RE it's") ==
        Words{"I", "'m", " can", "'t", " WE", "'", "RE", " it", "'s"});
  // "  12345": \s+(?!\S) backs off to one space so that the other prefixes the
  // number; \p{N}+ has no length limit. "\n\n  y" likewise keeps " y" whole.
  // Trailing spaces are followed by nothing, so (?!\S) holds for all of them.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "x  12345  ?!\n\n  y   ") ==
        Words{"x", " ", " 12345", " ", " ?!", "\n\n ", " y", "   "});
  // Emoji and skin-tone modifier are symbols: one " ?[^\s\p{L}\p{N}]+" run with "!".
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "hi \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!") ==
        Words{"hi", " \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!"});
  // Only ASCII space is the optional " ": a no-break space before a letter is a
  // lone whitespace that no alternative takes, left as a piece of its own.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "a\xC2\xA0"
                                         "b") == Words{"a", "\xC2\xA0", "b"});
  // Accented letters are letters; a combining mark (\p{M}) is "other".
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "caf\xC3\xA9 cafe\xCC\x81") ==
        Words{"caf\xC3\xA9", " cafe", "\xCC\x81"});
  // Invalid UTF-8 reads as U+FFFD (a symbol): 0xFF, and 0xC3 cut off at the end.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "a\xFF"
                                         "b\xC3") == Words{"a", kReplacement, "b", kReplacement});
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "").empty());
}

TEST_CASE("llama-bpe: case-insensitive contractions, numbers of up to three digits",
          "[pre_tokenizer]") {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // "'M" and "'RE" are contractions here. " 1234567": the space can lead only a
  // letter run, \s+(?!\S) fails before "1", so \s+ takes it alone; then digits go
  // in threes. "(" leads no letter (x follows "(" only after the space took it):
  // " (" is a ` ?[^\s\p{L}\p{N}]+` run, "x" a letter run, ")" another run.
  // "!!\n\n": the punctuation run takes the newlines after it. " \n  end":
  // \s*[\r\n]+ backtracks to end at the last newline (" \n"); then \s+(?!\S)
  // leaves one space to lead " end". The trailing "  " is \s+(?!\S) at the end.
  CHECK(pre_tokenize(PreTokenizer::Llama3, "I'M WE'RE 1234567 (x) ok!!\n\n \n  end  ") ==
        Words{"I", "'M", " WE", "'RE", " ", "123", "456", "7", " (", "x", ")", " ok", "!!\n\n",
              " \n", " ", " end", "  "});
  // 年 is a letter (Lo): its own letter run right after the digits.
  CHECK(pre_tokenize(PreTokenizer::Llama3, "abc 2024\xE5\xB9\xB4 x") ==
        Words{"abc", " ", "202", "4", "\xE5\xB9\xB4", " x"});
  // [^\r\n\p{L}\p{N}]? lets any one non-letter lead a word, U+FFFD included.
  CHECK(pre_tokenize(PreTokenizer::Llama3,
                     "a\xFF"
                     "b\xC3") == Words{"a", kReplacement + "b", kReplacement});
  CHECK(pre_tokenize(PreTokenizer::Llama3, "x.y\r\n\r\nz") == Words{"x", ".y", "\r\n\r\n", "z"});
}

TEST_CASE("qwen2: as llama-bpe, but every digit alone", "[pre_tokenizer]") {
  // \p{N} instead of \p{N}{1,3}.
  CHECK(pre_tokenize(PreTokenizer::Qwen2, "abc 2024\xE5\xB9\xB4 x") ==
        Words{"abc", " ", "2", "0", "2", "4", "\xE5\xB9\xB4", " x"});
  CHECK(pre_tokenize(PreTokenizer::Qwen2, "we'LL") == Words{"we", "'LL"});
}

TEST_CASE("smollm, starcoder, refact: digits first, then GPT-2's regex", "[pre_tokenizer]") {
  // \p{N} cuts out each digit; the pieces between ("x=", "; y ", ".") are then
  // split by GPT-2's regex on their own, so the space before "3" cannot lead it:
  // it is trailing whitespace of "; y ".
  CHECK(pre_tokenize(PreTokenizer::DigitsThenGpt2, "x=12; y 3.5") ==
        Words{"x", "=", "1", "2", ";", " y", " ", "3", ".", "5"});
}

TEST_CASE("falcon and default: punctuation runs first, ASCII digits in threes", "[pre_tokenizer]") {
  // falcon: [\p{P}\$\+<=>\^~\|`]+, GPT-2's regex, [0-9][0-9][0-9]. "=`" is one
  // run of the first class; " 1234567" is one GPT-2 word that the last regex
  // cuts into " ", "123", "456" and the unmatched "7".
  CHECK(pre_tokenize(PreTokenizer::Falcon, "Hi, a+b=`c` 1234567!") ==
        Words{"Hi", ",", " a", "+", "b", "=`", "c", "`", " ", "123", "456", "7", "!"});
  // default: the first class lacks "`", so "`c` 1234567" stays for GPT-2's regex;
  // \p{N}+ then splits " " from the digits before they go in threes.
  CHECK(pre_tokenize(PreTokenizer::Default, "Hi, a+b=`c` 1234567!") ==
        Words{"Hi", ",", " a", "+", "b", "=", "`", "c", "`", " ", "123", "456", "7", "!"});
  // Arabic-Indic digits are \p{N} but not [0-9].
  CHECK(pre_tokenize(PreTokenizer::Default, "x \xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4") ==
        Words{"x", " ", "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"});
}

TEST_CASE("deepseek-llm: newlines, cased letters, punctuation, CJK, numbers", "[pre_tokenizer]") {
  // [\r\n] cuts out each newline. \s?[cased letters]+ takes "Hello", " world" and
  // "abc" (CJK is not in that class). The punctuation class takes "!" and the
  // full-width comma U+FF0C. \s+$ takes the trailing "  " (and each lone "\n").
  // [一-龥ࠀ-一가-퟿]+ takes "你好" and "世界", and \p{N}+ splits " 123".
  CHECK(pre_tokenize(PreTokenizer::DeepseekLlm,
                     "Hello world!\n\n\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C "
                     "123abc  ") == Words{"Hello", " world", "!", "\n", "\n",
                                          "\xE4\xBD\xA0\xE5\xA5\xBD", "\xEF\xBC\x8C",
                                          "\xE4\xB8\x96\xE7\x95\x8C", " ", "123", "abc", "  "});
  // llama.cpp turns non-ASCII whitespace into U+000B before running these
  // regexes, so an em space U+2003 falls out of the CJK range U+0800..U+9FA5
  // that would otherwise join it to the ideographs around it.
  CHECK(
      pre_tokenize(PreTokenizer::DeepseekLlm, "\xE6\x97\xA5\xE6\x9C\xAC\xE2\x80\x83\xE8\xAA\x9E") ==
      Words{"\xE6\x97\xA5\xE6\x9C\xAC", "\xE2\x80\x83", "\xE8\xAA\x9E"});
  // The same for the ideographic space U+3000, also in the punctuation range
  // U+3000..U+3002: seen as U+000B it is only the optional \s? there, and no
  // punctuation follows it.
  CHECK(
      pre_tokenize(PreTokenizer::DeepseekLlm, "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x80\x80\xE8\xAA\x9E") ==
      Words{"\xE6\x97\xA5\xE6\x9C\xAC", "\xE3\x80\x80", "\xE8\xAA\x9E"});
  // Greek and Cyrillic are in the cased-letter class.
  CHECK(pre_tokenize(PreTokenizer::DeepseekLlm,
                     "\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1 "
                     "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82") ==
        Words{"\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1",
              " \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82"});
  // A combining accent is in no class: it splits "cafe" from "s".
  CHECK(pre_tokenize(PreTokenizer::DeepseekLlm, "cafe\xCC\x81s") == Words{"cafe", "\xCC\x81", "s"});
  // A cut-off three-byte character: 0xE6 0x97 read as two U+FFFD.
  CHECK(pre_tokenize(PreTokenizer::DeepseekLlm, "ab\xE6\x97") ==
        Words{"ab", kReplacement + kReplacement});
}

TEST_CASE("deepseek-coder: letters and punctuation with a leading space, single digits",
          "[pre_tokenizer]") {
  // [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N}. Before "return" only one of the
  // four spaces can join it; "+" is a symbol, so " #" is the punctuation match
  // in "+10 #"; the CJK regex then cuts " 数字" (a \s?\p{L}+ match) again.
  CHECK(pre_tokenize(PreTokenizer::DeepseekCoder,
                     "def f(x):\n    return x+10 # \xE6\x95\xB0\xE5\xAD\x97") ==
        Words{"def", " f", "(", "x", "):", "\n", "   ", " return", " x", "+", "1", "0", " #", " ",
              "\xE6\x95\xB0\xE5\xAD\x97"});
}

TEST_CASE("the pre-tokenizer name decides how a BPE vocabulary encodes", "[pre_tokenizer]") {
  // Tokens "2", "0", "4", "20", "202"; merges "2 0" then "20 2".
  const auto tokenizer_for = [](const char* pre, bool with_bos) {
    VocabularySpec spec;
    spec.kind = TokenizerKind::Bpe;
    spec.pre_tokenizer_name = pre;
    spec.tokens = {"2", "0", "4", "20", "202", "<|begin_of_text|>"};
    spec.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal,
                  TokenType::Normal, TokenType::Normal, TokenType::Control};
    spec.merges = {"2 0", "20 2"};
    if (with_bos) {
      spec.bos = 5;
    }
    return Tokenizer(std::make_shared<const Vocabulary>(std::move(spec)));
  };
  // llama-bpe: "202" + "4"; the Llama 3 family adds BOS by default.
  CHECK(tokenizer_for("llama-bpe", true).tokenize("2024", true, false) ==
        std::vector<TokenId>{5, 4, 2});
  // qwen2: every digit a word, nothing to merge; no BOS by default.
  CHECK(tokenizer_for("qwen2", true).tokenize("2024", true, false) ==
        std::vector<TokenId>{0, 1, 0, 2});
  // deepseek-llm: \p{N}+ keeps "2024" one word: 2+0 -> 20, 20+2 -> 202, then 4.
  CHECK(tokenizer_for("deepseek-llm", false).tokenize("2024", true, false) ==
        std::vector<TokenId>{4, 2});
}

namespace {

/// A Phi-3-like SentencePiece vocabulary as GGUF metadata, named `model_name`.
GgufWriter phi3_like_vocabulary(const std::string& model_name) {
  GgufWriter writer;
  writer.add_string("general.name", model_name);
  writer.add_string("tokenizer.ggml.model", "llama");
  writer.add_string_array("tokenizer.ggml.tokens",
                          {"<unk>", "<s>", "</s>", "<0x0A>", "\xE2\x96\x81", "H", "i",
                           "\xE2\x96\x81H", "\xE2\x96\x81Hi", "<|user|>", "<|end|>",
                           "<|endoftext|>"});
  writer.add_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1, 3, 3, 3});
  writer.add_float_array("tokenizer.ggml.scores", std::vector<float>(12, 0.0f));
  return writer;
}

constexpr TokenId kUnk = 0, kBos = 1, kEos = 2, kNewline = 3, kSpace = 4, kH = 5, kI = 6,
                  kSpaceHi = 8, kUser = 9, kEnd = 10, kEndOfText = 11;

} // namespace

TEST_CASE("Phi-3's special tokens swallow the whitespace after them", "[pre_tokenizer]") {
  const GgufImage phi3(phi3_like_vocabulary("Phi-3 Mini 4k Instruct"));
  const Tokenizer tokenizer(std::make_shared<const Vocabulary>(Vocabulary::from_gguf(phi3.open())));
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  // llama.cpp: every special token rstrip, then </s> too, but not <unk>, <s>,
  // <|endoftext|>. None lstrip.
  for (TokenId id : {kEos, kUser, kEnd}) {
    CHECK(vocabulary.token_rstrip(id));
  }
  for (TokenId id : {kUnk, kBos, kEndOfText}) {
    CHECK_FALSE(vocabulary.token_rstrip(id));
  }
  for (TokenId id : {kUnk, kBos, kEos, kUser, kEnd, kEndOfText}) {
    CHECK_FALSE(vocabulary.token_lstrip(id));
  }
  // <|user|> takes the "\n" after it; "Hi" then gets SPM's space prefix after a
  // special token, merging ▁+H then ▁H+i; <|end|> takes the final "\n".
  CHECK(tokenizer.encode("<|user|>\nHi<|end|>\n", false, true) ==
        std::vector<TokenId>{kUser, kSpaceHi, kEnd});
  // <s> keeps the space after it: "▁" prefix plus "▁Hi" gives ▁, ▁Hi.
  CHECK(tokenizer.encode("<s> Hi", false, true) == std::vector<TokenId>{kBos, kSpace, kSpaceHi});
  CHECK(tokenizer.encode("<|end|> Hi", false, true) == std::vector<TokenId>{kEnd, kSpaceHi});
  // Without parse_special the control tokens' texts are plain text.
  const std::vector<TokenId> plain = tokenizer.encode("<|end|>", false, false);
  CHECK(std::find(plain.begin(), plain.end(), kEnd) == plain.end());

  // The same vocabulary under another name keeps every newline: "▁\nHi" has no
  // merges (no "▁\n", "\nH" or "Hi" token), and "\n" falls back to <0x0A>.
  const GgufImage other(phi3_like_vocabulary("Some Model"));
  const Tokenizer plain_tokenizer(
      std::make_shared<const Vocabulary>(Vocabulary::from_gguf(other.open())));
  CHECK_FALSE(plain_tokenizer.vocabulary().token_rstrip(kEnd));
  CHECK(plain_tokenizer.encode("<|user|>\nHi<|end|>\n", false, true) ==
        std::vector<TokenId>{kUser, kSpace, kNewline, kH, kI, kEnd, kSpace, kNewline});
}

TEST_CASE("lstrip and rstrip tokens take the ASCII whitespace beside them", "[pre_tokenizer]") {
  // Byte-level tokens: "a", "b", "Ġ" (space), "Ġb", user-defined "<mask>".
  const auto tokenizer_for = [](const char* pre, std::vector<TokenId> lstrip,
                                std::vector<TokenId> rstrip) {
    VocabularySpec spec;
    spec.kind = TokenizerKind::Bpe;
    spec.pre_tokenizer_name = pre;
    spec.tokens = {"a", "b", "\xC4\xA0",
                   "\xC4\xA0"
                   "b",
                   "<mask>"};
    spec.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::Normal,
                  TokenType::UserDefined};
    spec.merges = {"\xC4\xA0 b"};
    spec.lstrip = std::move(lstrip);
    spec.rstrip = std::move(rstrip);
    return Tokenizer(std::make_shared<const Vocabulary>(std::move(spec)));
  };
  // No strip: "a " splits into "a" and a trailing " "; " b" merges to "Ġb".
  // User-defined tokens are matched without parse_special.
  CHECK(tokenizer_for("gpt-2", {}, {}).encode("a <mask> b", false) ==
        std::vector<TokenId>{0, 2, 4, 3});
  // jina-v2-de: llama.cpp gives <mask> lstrip, so the space before it goes.
  const Tokenizer jina = tokenizer_for("jina-v2-de", {}, {});
  CHECK(jina.vocabulary().token_lstrip(4));
  CHECK(jina.encode("a <mask> b", false) == std::vector<TokenId>{0, 4, 3});
  // rstrip from the spec: the space after it goes, "b" stays a plain byte token.
  CHECK(tokenizer_for("gpt-2", {}, {4}).encode("a <mask> b", false) ==
        std::vector<TokenId>{0, 2, 4, 1});
  // Both, over tabs and newlines (C isspace), not over other bytes.
  CHECK(tokenizer_for("gpt-2", {4}, {4}).encode("a\t\n<mask>\n\tb", false) ==
        std::vector<TokenId>{0, 4, 1});
  CHECK_THROWS_WITH(tokenizer_for("gpt-2", {9}, {}), Catch::Contains("lstrip token id 9"));
}

TEST_CASE("BOS and EOS follow tokenizer.ggml.add_bos_token and add_eos_token", "[pre_tokenizer]") {
  // No keys: SPM adds BOS, not EOS (llama.cpp's defaults for "llama").
  const GgufImage defaults(phi3_like_vocabulary("x"));
  const Tokenizer spm(std::make_shared<const Vocabulary>(Vocabulary::from_gguf(defaults.open())));
  CHECK(spm.tokenize("Hi", true, false) == std::vector<TokenId>{kBos, kSpaceHi});
  CHECK(spm.tokenize("Hi", false, false) == std::vector<TokenId>{kSpaceHi});

  // The file's keys win.
  GgufWriter writer = phi3_like_vocabulary("x");
  writer.add_bool("tokenizer.ggml.add_bos_token", false);
  writer.add_bool("tokenizer.ggml.add_eos_token", true);
  const GgufImage flipped(writer);
  const Tokenizer eos_only(
      std::make_shared<const Vocabulary>(Vocabulary::from_gguf(flipped.open())));
  CHECK_FALSE(eos_only.vocabulary().add_bos());
  CHECK(eos_only.vocabulary().add_eos());
  CHECK(eos_only.tokenize("Hi", true, false) == std::vector<TokenId>{kSpaceHi, kEos});
  CHECK(eos_only.tokenize("Hi", false, false) == std::vector<TokenId>{kSpaceHi});
  CHECK(eos_only.tokenize("", true, false) == std::vector<TokenId>{kEos});

  // BPE: no BOS by default except for the Llama 3 family; asking for EOS
  // without an EOS token is refused.
  const auto bpe = [](const char* pre, std::optional<bool> add_bos, std::optional<bool> add_eos) {
    VocabularySpec spec;
    spec.kind = TokenizerKind::Bpe;
    spec.pre_tokenizer_name = pre;
    spec.tokens = {"a", "b", "ab", "<|bos|>"};
    spec.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::Control};
    spec.merges = {"a b"};
    spec.bos = 3;
    spec.add_bos = add_bos;
    spec.add_eos = add_eos;
    return Vocabulary(std::move(spec));
  };
  CHECK(bpe("llama-bpe", std::nullopt, std::nullopt).add_bos());
  CHECK_FALSE(bpe("qwen2", std::nullopt, std::nullopt).add_bos());
  CHECK(bpe("qwen2", true, std::nullopt).add_bos());
  CHECK_FALSE(bpe("llama-bpe", false, std::nullopt).add_bos());
  CHECK_FALSE(bpe("qwen2", std::nullopt, std::nullopt).add_eos());
  CHECK_THROWS_WITH(bpe("qwen2", std::nullopt, true), Catch::Contains("EOS"));
}
