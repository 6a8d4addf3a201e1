#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/text/detokenizer.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/unicode.hpp"
#include "caflm/text/vocabulary.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace caflm;

namespace {

const std::string kVocabDir = std::string(CAFLM_TESTDATA_DIR) + "/vocab/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> split(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t at = text.find(separator); at != std::string::npos;
       at = text.find(separator, begin)) {
    parts.push_back(text.substr(begin, at - begin));
    begin = at + separator.size();
  }
  parts.push_back(text.substr(begin));
  return parts;
}

/// One llama.cpp tokenizer test case: a text and the ids it must encode to.
struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};

/// Reads NAME.inp (texts, each followed by a line __ggml_vocab_test__) and
/// NAME.out (one line of ids per text).
std::vector<VocabCase> read_vocab_cases(const std::string& name) {
  std::vector<std::string> texts =
      split(read_file(kVocabDir + name + ".inp"), "\n__ggml_vocab_test__\n");
  REQUIRE(texts.back().empty()); // the file ends with a separator
  texts.pop_back();
  std::vector<std::string> lines = split(read_file(kVocabDir + name + ".out"), "\n");
  REQUIRE(lines.back().empty());
  lines.pop_back();
  REQUIRE(lines.size() == texts.size());

  std::vector<VocabCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) {
    VocabCase c{texts[i], {}};
    std::istringstream ids(lines[i]);
    for (TokenId id = 0; ids >> id;) {
      c.ids.push_back(id);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

/// The text with control characters escaped, for failure messages.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::shared_ptr<const Vocabulary> load_vocabulary_at(const std::string& path) {
  const GgufFile file = GgufFile::open(path);
  return std::make_shared<const Vocabulary>(Vocabulary::from_gguf(file));
}

std::shared_ptr<const Vocabulary> load_vocabulary(const std::string& name) {
  return load_vocabulary_at(kVocabDir + name);
}

const Tokenizer& spm_tokenizer() {
  static const Tokenizer tokenizer(load_vocabulary("ggml-vocab-llama-spm.gguf"));
  return tokenizer;
}

const Tokenizer& gpt2_tokenizer() {
  static const Tokenizer tokenizer(load_vocabulary("ggml-vocab-gpt-2.gguf"));
  return tokenizer;
}

void check_vocab_cases(const Tokenizer& tokenizer, const std::string& name) {
  const std::vector<VocabCase> cases = read_vocab_cases(name);
  REQUIRE(cases.size() > 40);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(name << " case " << i << ": \"" << printable(cases[i].text) << "\"");
    CHECK(tokenizer.encode(cases[i].text, false) == cases[i].ids);
  }
}

/// Streams `ids` through a StreamingDetokenizer, checking every delta is whole
/// characters; returns the deltas joined, flush included.
std::string stream(const Tokenizer& tokenizer, const std::vector<TokenId>& ids, bool starts_text) {
  StreamingDetokenizer detokenizer(tokenizer, starts_text);
  std::string joined;
  for (TokenId id : ids) {
    const std::string delta = detokenizer.push(id);
    CHECK(unicode::sanitize_utf8(delta) == delta);
    joined += delta;
  }
  joined += detokenizer.flush();
  return joined;
}

TokenId token(const Tokenizer& tokenizer, std::string_view text) {
  const std::optional<TokenId> id = tokenizer.vocabulary().find(text);
  REQUIRE(id);
  return *id;
}

/// A GGUF image holding `writer`'s metadata, opened from memory.
struct GgufImage {
  explicit GgufImage(const GgufWriter& writer)
    : bytes(writer.to_bytes()) {}
  GgufFile open() const { return GgufFile::from_memory(bytes.data(), bytes.size()); }
  std::vector<uint8_t> bytes;
};

const std::string kReplacement = "\xEF\xBF\xBD"; // U+FFFD

} // namespace

TEST_CASE("SPM tokenizer reproduces llama.cpp's test vectors", "[tokenizer]") {
  check_vocab_cases(spm_tokenizer(), "ggml-vocab-llama-spm.gguf");
}

TEST_CASE("GPT-2 tokenizer reproduces llama.cpp's test vectors", "[tokenizer]") {
  check_vocab_cases(gpt2_tokenizer(), "ggml-vocab-gpt-2.gguf");
}

TEST_CASE("vocabulary metadata is read from GGUF", "[tokenizer]") {
  const Vocabulary& spm = spm_tokenizer().vocabulary();
  CHECK(spm.kind() == TokenizerKind::Spm);
  CHECK(spm.size() == 32000);
  CHECK(spm.bos() == TokenId{1});
  CHECK(spm.eos() == TokenId{2});
  CHECK(spm.unk() == TokenId{0});
  CHECK(spm.add_bos());
  CHECK_FALSE(spm.add_eos());
  CHECK(spm.add_space_prefix());
  CHECK(spm.token_text(1) == "<s>");
  CHECK(spm.token_type(0) == TokenType::Unknown);
  CHECK(spm.token_type(3) == TokenType::Byte);
  CHECK(spm.is_control(1));
  CHECK(spm.is_eog(2));
  CHECK_FALSE(spm.is_eog(1));
  CHECK_FALSE(spm.is_eog(15043));
  CHECK(spm.byte_token(0x0A) == spm.find("<0x0A>"));
  CHECK_THROWS_AS(spm.token_text(32000), std::out_of_range);

  const Vocabulary& gpt2 = gpt2_tokenizer().vocabulary();
  CHECK(gpt2.kind() == TokenizerKind::Bpe);
  CHECK(gpt2.pre_tokenizer() == PreTokenizer::Gpt2);
  CHECK(gpt2.size() == 50257);
  CHECK(gpt2.bos() == TokenId{50256});
  CHECK_FALSE(gpt2.add_bos());
  CHECK_FALSE(gpt2.add_space_prefix());
  CHECK(gpt2.is_eog(50256));
  CHECK(gpt2.is_control(50256));
  CHECK(gpt2.merge_rank("\xC4\xA0", "t") == uint32_t{0}); // "Ġ t", the first merge
  CHECK_FALSE(gpt2.merge_rank("t", "\xC4\xA0"));
}

TEST_CASE("BOS is added on request when the vocabulary has one", "[tokenizer]") {
  CHECK(spm_tokenizer().encode("Hello world", true) == std::vector<TokenId>{1, 15043, 3186});
  CHECK(spm_tokenizer().encode("", true) == std::vector<TokenId>{1});
  CHECK(gpt2_tokenizer().encode("Hello world", true) == std::vector<TokenId>{50256, 15496, 995});
}

TEST_CASE("special token texts are parsed only with parse_special", "[tokenizer]") {
  const Tokenizer& spm = spm_tokenizer();
  // After a special token SPM adds the space prefix again, as llama.cpp does.
  CHECK(spm.encode("<s>Hello</s>", false, true) == std::vector<TokenId>{1, 15043, 2});
  const std::vector<TokenId> literal = spm.encode("<s>Hello</s>", false);
  CHECK(std::find(literal.begin(), literal.end(), TokenId{1}) == literal.end());
  CHECK(std::find(literal.begin(), literal.end(), TokenId{2}) == literal.end());
  CHECK(spm.decode(literal) == "<s>Hello</s>");

  const Tokenizer& gpt2 = gpt2_tokenizer();
  CHECK(gpt2.encode("Hello<|endoftext|>", false, true) == std::vector<TokenId>{15496, 50256});
  const std::vector<TokenId> literal_gpt2 = gpt2.encode("Hello<|endoftext|>", false);
  CHECK(std::find(literal_gpt2.begin(), literal_gpt2.end(), TokenId{50256}) == literal_gpt2.end());
  CHECK(gpt2.decode(literal_gpt2) == "Hello<|endoftext|>");
}

TEST_CASE("pieces are the raw bytes of a token", "[tokenizer]") {
  const Tokenizer& spm = spm_tokenizer();
  CHECK(spm.token_to_piece(15043) == " Hello");
  CHECK(spm.token_to_piece(token(spm, "<0x0A>")) == "\n");
  CHECK(spm.token_to_piece(token(spm, "<0xE2>")) == "\xE2");
  CHECK(spm.token_to_piece(1).empty()); // control
  CHECK(spm.token_to_piece(0).empty()); // unknown
  CHECK_THROWS_AS(spm.token_to_piece(32000), std::out_of_range);

  const Tokenizer& gpt2 = gpt2_tokenizer();
  CHECK(gpt2.token_to_piece(18435) == " Hello");
  CHECK(gpt2.token_to_piece(198) == "\n");
  CHECK(gpt2.token_to_piece(50256).empty());
  // 8582 is the first half of U+1F680's four bytes.
  CHECK(gpt2.token_to_piece(8582) == "\xF0\x9F");
}

TEST_CASE("decode inverts encode", "[tokenizer]") {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const Tokenizer& tokenizer =
        std::string(name) == "ggml-vocab-gpt-2.gguf" ? gpt2_tokenizer() : spm_tokenizer();
    for (const VocabCase& c : read_vocab_cases(name)) {
      INFO(name << ": \"" << printable(c.text) << "\"");
      CHECK(tokenizer.decode(tokenizer.encode(c.text, false)) == c.text);
      CHECK(tokenizer.decode(tokenizer.encode(c.text, true)) == c.text);
    }
  }
  // A continuation keeps the SPM word-start space.
  CHECK(spm_tokenizer().decode({15043, 3186}, false) == " Hello world");
  CHECK(spm_tokenizer().decode({15043, 3186}) == "Hello world");
  CHECK(gpt2_tokenizer().decode({18435, 995}) == " Hello world");
}

TEST_CASE("decode replaces bytes that are not UTF-8", "[tokenizer]") {
  const Tokenizer& spm = spm_tokenizer();
  const TokenId e2 = token(spm, "<0xE2>");
  const TokenId x82 = token(spm, "<0x82>");
  const TokenId ff = token(spm, "<0xFF>");
  const TokenId a = token(spm, "A");
  CHECK(spm.decode({e2, x82}) == kReplacement);     // truncated at the end
  CHECK(spm.decode({e2, a}) == kReplacement + "A"); // cut short by an ASCII byte
  CHECK(spm.decode({ff, a}) == kReplacement + "A"); // never valid
  CHECK(spm.decode({x82, x82}) == kReplacement + kReplacement);
}

TEST_CASE("streaming detokenizer never splits a character", "[tokenizer]") {
  const Tokenizer& spm = spm_tokenizer();
  const TokenId e2 = token(spm, "<0xE2>");
  const TokenId x82 = token(spm, "<0x82>");
  const TokenId xac = token(spm, "<0xAC>");
  {
    StreamingDetokenizer detokenizer(spm);
    CHECK(detokenizer.push(15043) == " Hello");
    CHECK(detokenizer.push(e2).empty());
    CHECK(detokenizer.push(x82).empty());
    CHECK(detokenizer.push(xac) == "\xE2\x82\xAC"); // €
    CHECK(detokenizer.push(2).empty());             // EOS has no text
    CHECK(detokenizer.flush().empty());
  }
  {
    // starts_text drops the SPM space prefix, even after a leading BOS.
    StreamingDetokenizer detokenizer(spm, true);
    CHECK(detokenizer.push(1).empty());
    CHECK(detokenizer.push(15043) == "Hello");
    CHECK(detokenizer.push(3186) == " world");
  }
  {
    // An impossible byte comes out at once; a truncated character at flush.
    StreamingDetokenizer detokenizer(spm);
    CHECK(detokenizer.push(token(spm, "<0xFF>")) == kReplacement);
    CHECK(detokenizer.push(e2).empty());
    CHECK(detokenizer.push(x82).empty());
    CHECK(detokenizer.flush() == kReplacement);
    CHECK(detokenizer.flush().empty());
  }
  {
    StreamingDetokenizer detokenizer(spm);
    CHECK(detokenizer.push(e2).empty());
    CHECK(detokenizer.push(token(spm, "A")) == kReplacement + "A");
  }
}

TEST_CASE("streamed text equals decode of the whole sequence", "[tokenizer]") {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const Tokenizer& tokenizer =
        std::string(name) == "ggml-vocab-gpt-2.gguf" ? gpt2_tokenizer() : spm_tokenizer();
    for (const VocabCase& c : read_vocab_cases(name)) {
      INFO(name << ": \"" << printable(c.text) << "\"");
      for (bool starts_text : {false, true}) {
        CHECK(stream(tokenizer, c.ids, starts_text) == tokenizer.decode(c.ids, starts_text));
      }
    }
  }
  // Byte tokens in every order, valid or not: streaming and decoding agree.
  const Tokenizer& spm = spm_tokenizer();
  const std::vector<TokenId> bytes = {token(spm, "<0xF0>"), token(spm, "<0x9F>"),
                                      token(spm, "<0xA6>"), token(spm, "<0x99>"),
                                      token(spm, "<0xC3>"), 15043};
  std::vector<TokenId> ids;
  for (int round = 0; round < 200; ++round) {
    ids.push_back(bytes[(round * 7 + round / 3) % bytes.size()]);
    CHECK(stream(spm, ids, false) == spm.decode(ids, false));
  }
}

TEST_CASE("pre-tokenizers split words like their regexes", "[tokenizer]") {
  using Words = std::vector<std::string>;
  const std::string text = "abc 12345 x\n\n y";
  CHECK(pre_tokenize(PreTokenizer::Gpt2, text) == Words{"abc", " 12345", " x", "\n\n", " y"});
  CHECK(pre_tokenize(PreTokenizer::Llama3, text) ==
        Words{"abc", " ", "123", "45", " x", "\n\n", " y"});
  CHECK(pre_tokenize(PreTokenizer::Qwen2, text) ==
        Words{"abc", " ", "1", "2", "3", "4", "5", " x", "\n\n", " y"});
  CHECK(pre_tokenize(PreTokenizer::DigitsThenGpt2, text) ==
        Words{"abc", " ", "1", "2", "3", "4", "5", " x", "\n\n", " y"});

  // Contractions: case-sensitive for GPT-2, not for Llama 3.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "I'M we're") == Words{"I", "'", "M", " we", "'re"});
  CHECK(pre_tokenize(PreTokenizer::Llama3, "I'M we're") == Words{"I", "'M", " we", "'re"});
  // Llama 3 lets one non-letter lead a word and keeps newlines after punctuation.
  CHECK(pre_tokenize(PreTokenizer::Llama3, "a.b!?\n\nc") == Words{"a", ".b", "!?\n\n", "c"});
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "a.b!?\n\nc") ==
        Words{"a", ".", "b", "!?", "\n", "\n", "c"});
  // Unicode classes: CJK letters, Arabic-Indic digits, no-break space.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "\xE6\x97\xA5\xE6\x9C\xAC \xD9\xA1\xD9\xA2\xC2\xA0x") ==
        Words{"\xE6\x97\xA5\xE6\x9C\xAC", " \xD9\xA1\xD9\xA2", "\xC2\xA0", "x"});
  // Trailing spaces stay together.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "a   ") == Words{"a", "   "});
  CHECK(pre_tokenize(PreTokenizer::Llama3, "a   b") == Words{"a", "  ", " b"});
  // Bytes that are not UTF-8 become U+FFFD, as llama.cpp reads them.
  CHECK(pre_tokenize(PreTokenizer::Gpt2, "a\xFF") == Words{"a", kReplacement});
}

TEST_CASE("unknown pre-tokenizer names fall back to llama.cpp's default, with a warning",
          "[tokenizer]") {
  const auto vocabulary_named = [](const char* name) {
    VocabularySpec spec;
    spec.kind = TokenizerKind::Bpe;
    spec.pre_tokenizer_name = name;
    spec.tokens = {"a", "b", "ab"};
    spec.merges = {"a b"};
    return Vocabulary(std::move(spec));
  };
  const auto pre_of = [&](const char* name) { return vocabulary_named(name).pre_tokenizer(); };
  CHECK(pre_of("gpt-2") == PreTokenizer::Gpt2);
  CHECK(pre_of("default") == PreTokenizer::Default);
  CHECK(pre_of("no-such-model") == PreTokenizer::Default);
  CHECK(pre_of("") == PreTokenizer::Default);
  CHECK(pre_of("llama-bpe") == PreTokenizer::Llama3);
  CHECK(pre_of("qwen2") == PreTokenizer::Qwen2);
  CHECK(pre_of("smollm") == PreTokenizer::DigitsThenGpt2);

  // Known names, "default" included, give no warning.
  CHECK(vocabulary_named("gpt-2").pre_tokenizer_warning().empty());
  CHECK(vocabulary_named("default").pre_tokenizer_warning().empty());
  // An unknown name is named in the warning, with the fallback used.
  const std::string unknown = vocabulary_named("no-such-model").pre_tokenizer_warning();
  CHECK_THAT(unknown, Catch::Contains("'no-such-model'"));
  CHECK_THAT(unknown, Catch::Contains("'default'"));
  const std::string missing = vocabulary_named("").pre_tokenizer_warning();
  CHECK_THAT(missing, Catch::Contains("no tokenizer.ggml.pre"));
  CHECK_THAT(missing, Catch::Contains("'default'"));
  // SentencePiece vocabularies have no pre-tokenizer: nothing to warn about.
  VocabularySpec spm;
  spm.tokens = {"<unk>", "<s>", "</s>"};
  spm.pre_tokenizer_name = "no-such-model";
  CHECK(Vocabulary(std::move(spm)).pre_tokenizer_warning().empty());
}

TEST_CASE("Llama 3 vocabularies skip merges for whole-token words", "[tokenizer]") {
  VocabularySpec spec;
  spec.kind = TokenizerKind::Bpe;
  spec.pre_tokenizer_name = "llama-bpe";
  // "abc" is a token, but no merge sequence builds it.
  spec.tokens = {"a", "b", "c", "ab", "abc", "<|begin_of_text|>"};
  spec.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal,
                TokenType::Normal, TokenType::Normal, TokenType::Control};
  spec.merges = {"a b"};
  spec.bos = 5;
  const auto vocabulary = std::make_shared<const Vocabulary>(std::move(spec));
  CHECK(vocabulary->ignore_merges());
  CHECK(vocabulary->add_bos());
  const Tokenizer tokenizer(vocabulary);
  CHECK(tokenizer.encode("abc", true) == std::vector<TokenId>{5, 4});
  CHECK(tokenizer.encode("abca", false) == std::vector<TokenId>{3, 2, 0});
}

TEST_CASE("user-defined tokens are matched even without parse_special", "[tokenizer]") {
  VocabularySpec spec;
  spec.kind = TokenizerKind::Bpe;
  spec.tokens = {"a", "b", "ab", "<tool>"};
  spec.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::UserDefined};
  spec.merges = {"a b"};
  const Tokenizer tokenizer(std::make_shared<const Vocabulary>(std::move(spec)));
  CHECK(tokenizer.encode("ab<tool>a", false) == std::vector<TokenId>{2, 3, 0});
  CHECK(tokenizer.token_to_piece(3) == "<tool>");
}

TEST_CASE("bad vocabulary metadata is refused with a reason", "[tokenizer]") {
  const auto message_of = [](VocabularySpec spec) {
    try {
      Vocabulary vocabulary(std::move(spec));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  VocabularySpec base;
  base.kind = TokenizerKind::Spm;
  base.tokens = {"<unk>", "<s>", "</s>", "a"};

  VocabularySpec no_tokens = base;
  no_tokens.tokens.clear();
  CHECK_THAT(message_of(no_tokens), Catch::Contains("no tokens"));
  VocabularySpec bad_bos = base;
  bad_bos.bos = 4;
  CHECK_THAT(message_of(bad_bos), Catch::Contains("BOS token id 4"));
  VocabularySpec duplicate = base;
  duplicate.tokens.push_back("a");
  CHECK_THAT(message_of(duplicate), Catch::Contains("twice"));
  VocabularySpec short_scores = base;
  short_scores.scores = {0.0f};
  CHECK_THAT(message_of(short_scores), Catch::Contains("1 scores"));
  VocabularySpec bpe_without_merges = base;
  bpe_without_merges.kind = TokenizerKind::Bpe;
  CHECK_THAT(message_of(bpe_without_merges), Catch::Contains("no merges"));
  VocabularySpec bad_merge = bpe_without_merges;
  bad_merge.merges = {"ab"};
  CHECK_THAT(message_of(bad_merge), Catch::Contains("merge 0 ('ab')"));

  GgufWriter bert;
  bert.add_string("tokenizer.ggml.model", "bert");
  bert.add_string_array("tokenizer.ggml.tokens", {"a"});
  CHECK_THROWS_WITH(Vocabulary::from_gguf(GgufImage(bert).open()), Catch::Contains("'bert'"));
  GgufWriter no_vocab;
  no_vocab.add_string("tokenizer.ggml.model", "llama");
  CHECK_THROWS_WITH(Vocabulary::from_gguf(GgufImage(no_vocab).open()),
                    Catch::Contains("tokenizer.ggml.tokens"));
  GgufWriter wrong_type;
  wrong_type.add_string("tokenizer.ggml.model", "llama");
  wrong_type.add_string("tokenizer.ggml.tokens", "a");
  CHECK_THROWS_AS(Vocabulary::from_gguf(GgufImage(wrong_type).open()), GgufError);
}

TEST_CASE("a learned byte-level BPE vocabulary round-trips text and GGUF", "[tokenizer]") {
  const auto vocabulary = std::make_shared<const Vocabulary>(Vocabulary::byte_level_bpe(300));
  CHECK(vocabulary->kind() == TokenizerKind::Bpe);
  CHECK(vocabulary->merges().size() > 100);
  CHECK(vocabulary->merges().size() <= 300);
  CHECK(vocabulary->size() <= 256 + 300 + 2);
  REQUIRE(vocabulary->bos());
  REQUIRE(vocabulary->eos());
  CHECK(vocabulary->token_text(*vocabulary->bos()) == "<s>");
  CHECK(vocabulary->token_text(*vocabulary->eos()) == "</s>");
  CHECK(vocabulary->is_control(*vocabulary->bos()));
  CHECK(vocabulary->is_eog(*vocabulary->eos()));
  CHECK(vocabulary->add_bos());

  const Tokenizer tokenizer(vocabulary);
  const std::string english = "Once upon a time, the people of the town told their stories.";
  const std::vector<TokenId> ids = tokenizer.encode(english, true);
  CHECK(ids.front() == *vocabulary->bos());
  CHECK(ids.size() < english.size() / 2); // merges make common words short
  CHECK(tokenizer.decode(ids) == english);
  const std::string other = "Ünïcödé 日本語 🦙\t\n\x01 <s>";
  CHECK(tokenizer.decode(tokenizer.encode(other, false)) == other);
  CHECK(tokenizer.token_to_piece(0x41) == "A"); // byte tokens have id = byte value

  GgufWriter writer;
  vocabulary->write_gguf_metadata(writer);
  const GgufImage image(writer);
  const Vocabulary reread = Vocabulary::from_gguf(image.open());
  CHECK(reread.size() == vocabulary->size());
  CHECK(reread.merges() == vocabulary->merges());
  CHECK(reread.bos() == vocabulary->bos());
  CHECK(reread.eos() == vocabulary->eos());
  CHECK(reread.add_bos() == vocabulary->add_bos());
  const Tokenizer reread_tokenizer(
      std::make_shared<const Vocabulary>(Vocabulary::from_gguf(image.open())));
  CHECK(reread_tokenizer.encode(english, true) == ids);
}

TEST_CASE("SPM vocabulary round-trips through GGUF metadata", "[tokenizer]") {
  GgufWriter writer;
  spm_tokenizer().vocabulary().write_gguf_metadata(writer);
  const GgufImage image(writer);
  const Tokenizer reread(std::make_shared<const Vocabulary>(Vocabulary::from_gguf(image.open())));
  for (const VocabCase& c : read_vocab_cases("ggml-vocab-llama-spm.gguf")) {
    INFO("\"" << printable(c.text) << "\"");
    CHECK(reread.encode(c.text, false) == c.ids);
  }
}

TEST_CASE("prompts of the reference model encode and generated text decodes as in llama.cpp",
          "[tokenizer]") {
  const std::string models = std::string(CAFLM_TESTDATA_DIR) + "/models/";
  const Tokenizer tokenizer(load_vocabulary_at(models + "tiny-llama-f32.gguf"));
  const nlohmann::json expected =
      nlohmann::json::parse(read_file(models + "tiny-llama-f32.expected.json"));
  REQUIRE(expected.at("cases").size() == 8);
  for (const nlohmann::json& c : expected.at("cases")) {
    const std::string prompt = c.at("prompt").get<std::string>();
    INFO("\"" << printable(prompt) << "\"");
    CHECK(tokenizer.encode(prompt, true) == c.at("prompt_tokens").get<std::vector<TokenId>>());
    // The server streams generated pieces as they come: a continuation.
    const auto generated = c.at("greedy_tokens").get<std::vector<TokenId>>();
    CHECK(stream(tokenizer, generated, false) == c.at("greedy_text").get<std::string>());
  }
}
