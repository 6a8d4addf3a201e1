// libFuzzer target for the tokenizers, run once per vocabulary: the GGUF file
// named by CAFLM_FUZZ_VOCAB (a vocab-only file such as
// ../shared/testdata/vocab/ggml-vocab-gpt-2.gguf); CAFLM_FUZZ_PRE, if set,
// replaces its tokenizer.ggml.pre (so one BPE vocabulary runs under every
// pre-tokenizer). Without CAFLM_FUZZ_VOCAB it uses Vocabulary::byte_level_bpe().
//
// The first input byte holds flags (bit 0: the rest is token ids, 3 bytes
// each, little-endian, modulo the vocabulary size, instead of text; bit 1:
// add BOS; bit 2: parse special tokens). What must hold, for any input:
// - encode() and tokenize() give ids inside the vocabulary and throw nothing;
// - decode() gives valid UTF-8, and a StreamingDetokenizer fed the same ids
//   gives the same text;
// - decode(encode(text)) == text where the tokenizer defines a round trip:
//   valid UTF-8, special tokens not parsed, every byte reachable through the
//   vocabulary (byte tokens or the byte-level alphabet), and for SPM no U+2581
//   (it stands for a space) and no user-defined token in the text (SPM puts a
//   space after one);
// - every pre-tokenizer cuts the text into non-empty words that, joined, are
//   the text as the BPE tokenizer reads it (malformed bytes as U+FFFD).
// Token ids decode back to text that encodes without error, and that text is
// checked as above. A crash, sanitizer report, exception or hang is a bug.
// See fuzz/CMakeLists.txt for how to build and run it.

#include "caflm/gguf/gguf.hpp"
#include "caflm/text/detokenizer.hpp"
#include "caflm/text/pre_tokenizer.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/unicode.hpp"
#include "caflm/text/vocabulary.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using caflm::TokenId;

constexpr caflm::PreTokenizer kPreTokenizers[] = {
    caflm::PreTokenizer::Default,        caflm::PreTokenizer::Gpt2,
    caflm::PreTokenizer::Llama3,         caflm::PreTokenizer::Qwen2,
    caflm::PreTokenizer::DigitsThenGpt2, caflm::PreTokenizer::Falcon,
    caflm::PreTokenizer::DeepseekLlm,    caflm::PreTokenizer::DeepseekCoder,
};

/// What LLVMFuzzerInitialize sets up once.
struct Fixture {
  std::unique_ptr<caflm::Tokenizer> tokenizer;
  /// Whether decode(encode(text)) == text for valid UTF-8 (see the header).
  bool round_trip = false;
  /// SPM only: texts of user-defined tokens, after which a space is inserted.
  std::vector<std::string> user_defined;
};

Fixture* fixture = nullptr;

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer_fuzz: %s (text of %zu bytes: \"", what, text.size());
  for (char c : text) {
    std::fprintf(stderr, "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
  }
  std::fprintf(stderr, "\")\n");
  std::abort();
}

/// The vocabulary `vocabulary` with tokenizer.ggml.pre replaced by `pre`.
caflm::Vocabulary with_pre_tokenizer(const caflm::Vocabulary& vocabulary, std::string pre) {
  caflm::VocabularySpec spec;
  spec.kind = vocabulary.kind();
  spec.pre_tokenizer_name = std::move(pre);
  for (TokenId id = 0; id < vocabulary.size(); ++id) {
    spec.tokens.emplace_back(vocabulary.token_text(id));
    spec.scores.push_back(vocabulary.token_score(id));
    spec.types.push_back(vocabulary.token_type(id));
    if (vocabulary.token_lstrip(id)) {
      spec.lstrip.push_back(id);
    }
    if (vocabulary.token_rstrip(id)) {
      spec.rstrip.push_back(id);
    }
  }
  spec.merges = vocabulary.merges();
  spec.bos = vocabulary.bos();
  spec.eos = vocabulary.eos();
  spec.unk = vocabulary.unk();
  spec.pad = vocabulary.pad();
  spec.eot = vocabulary.eot();
  spec.add_bos = vocabulary.add_bos();
  spec.add_eos = vocabulary.add_eos();
  spec.add_space_prefix = vocabulary.add_space_prefix();
  return caflm::Vocabulary(std::move(spec));
}

/// Whether every byte value has a token whose piece is that byte alone.
bool every_byte_reachable(const caflm::Tokenizer& tokenizer) {
  const caflm::Vocabulary& vocabulary = tokenizer.vocabulary();
  for (uint32_t byte = 0; byte < 256; ++byte) {
    std::optional<TokenId> id;
    if (vocabulary.kind() == caflm::TokenizerKind::Spm) {
      id = vocabulary.byte_token(static_cast<uint8_t>(byte));
    } else {
      std::string text;
      caflm::unicode::append_utf8(text,
                                  caflm::unicode::byte_to_byte_level(static_cast<uint8_t>(byte)));
      id = vocabulary.find(text);
    }
    if (!id || tokenizer.piece(*id) != std::string(1, static_cast<char>(byte))) {
      return false;
    }
  }
  return true;
}

bool is_valid_utf8(std::string_view text) {
  return caflm::unicode::sanitize_utf8(text) == text;
}

/// Decodes `ids` and checks the result against the streaming detokenizer.
std::string decode_checked(const caflm::Tokenizer& tokenizer, const std::vector<TokenId>& ids,
                           bool starts_text) {
  const std::string text = tokenizer.decode(ids, starts_text);
  if (!is_valid_utf8(text)) {
    fail("decode gave invalid UTF-8", text);
  }
  caflm::StreamingDetokenizer detokenizer(tokenizer, starts_text);
  std::string streamed;
  for (TokenId id : ids) {
    streamed += detokenizer.push(id);
  }
  streamed += detokenizer.flush();
  if (streamed != text) {
    fail("streamed text differs from decode", text);
  }
  return text;
}

void check_pre_tokenizers(std::string_view text) {
  std::string as_read; // the text as encode_bpe reads it
  for (uint32_t code_point : caflm::unicode::decode_utf8_lenient(text)) {
    caflm::unicode::append_utf8(as_read, code_point);
  }
  for (caflm::PreTokenizer pre_tokenizer : kPreTokenizers) {
    std::string joined;
    for (const std::string& word : caflm::pre_tokenize(pre_tokenizer, text)) {
      if (word.empty()) {
        fail("a pre-tokenizer made an empty word", text);
      }
      joined += word;
    }
    if (joined != as_read) {
      fail("a pre-tokenizer's words do not join to the text", text);
    }
  }
}

void check_text(const Fixture& f, std::string_view text, bool add_bos, bool parse_special) {
  const caflm::Tokenizer& tokenizer = *f.tokenizer;
  const caflm::Vocabulary& vocabulary = tokenizer.vocabulary();
  const std::vector<TokenId> ids = tokenizer.encode(text, add_bos, parse_special);
  for (TokenId id : ids) {
    if (id >= vocabulary.size()) {
      fail("encode gave an id outside the vocabulary", text);
    }
  }
  for (TokenId id : tokenizer.tokenize(text, add_bos, parse_special)) {
    if (id >= vocabulary.size()) {
      fail("tokenize gave an id outside the vocabulary", text);
    }
  }
  const std::string decoded = decode_checked(tokenizer, ids, true);

  bool round_trip = f.round_trip && !parse_special && is_valid_utf8(text);
  if (round_trip && vocabulary.kind() == caflm::TokenizerKind::Spm) {
    round_trip = text.find("\xE2\x96\x81") == std::string_view::npos;
    for (const std::string& user_defined : f.user_defined) {
      round_trip = round_trip && text.find(user_defined) == std::string_view::npos;
    }
  }
  if (round_trip && decoded != text) {
    fail("decode(encode(text)) differs from the text", text);
  }
  check_pre_tokenizers(text);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    fixture = new Fixture;
    const char* vocab_path = std::getenv("CAFLM_FUZZ_VOCAB");
    const char* pre = std::getenv("CAFLM_FUZZ_PRE");
    auto vocabulary =
        vocab_path && *vocab_path
            ? std::make_shared<caflm::Vocabulary>(
                  caflm::Vocabulary::from_gguf(caflm::GgufFile::open(vocab_path)))
            : std::make_shared<caflm::Vocabulary>(caflm::Vocabulary::byte_level_bpe());
    if (pre) {
      vocabulary = std::make_shared<caflm::Vocabulary>(with_pre_tokenizer(*vocabulary, pre));
    }
    fixture->tokenizer = std::make_unique<caflm::Tokenizer>(std::move(vocabulary));
    const caflm::Vocabulary& v = fixture->tokenizer->vocabulary();
    fixture->round_trip = every_byte_reachable(*fixture->tokenizer);
    if (v.kind() == caflm::TokenizerKind::Spm) {
      for (TokenId id : v.special_tokens()) {
        if (v.token_type(id) == caflm::TokenType::UserDefined) {
          fixture->user_defined.emplace_back(v.token_text(id));
        }
      }
    }
    std::fprintf(stderr, "tokenizer_fuzz: %s, %zu tokens, %s, pre-tokenizer %s, round trip %s\n",
                 vocab_path && *vocab_path ? vocab_path : "byte_level_bpe()", v.size(),
                 v.kind() == caflm::TokenizerKind::Spm ? "SPM" : "BPE",
                 std::string(caflm::pre_tokenizer_name(v.pre_tokenizer())).c_str(),
                 fixture->round_trip ? "checked" : "not defined");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot load the vocabulary: %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const uint8_t flags = data[0];
  const bool ids_mode = (flags & 1) != 0;
  const bool add_bos = (flags & 2) != 0;
  const bool parse_special = (flags & 4) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const caflm::Tokenizer& tokenizer = *fixture->tokenizer;
  if (!ids_mode) {
    check_text(*fixture, rest, add_bos, parse_special);
    return 0;
  }
  const size_t vocab_size = tokenizer.vocabulary().size();
  std::vector<TokenId> ids;
  for (size_t i = 0; i + 3 <= rest.size(); i += 3) {
    const uint32_t value = static_cast<uint8_t>(rest[i]) |
                           static_cast<uint32_t>(static_cast<uint8_t>(rest[i + 1])) << 8 |
                           static_cast<uint32_t>(static_cast<uint8_t>(rest[i + 2])) << 16;
    ids.push_back(static_cast<TokenId>(value % vocab_size));
  }
  decode_checked(tokenizer, ids, false);
  check_text(*fixture, decode_checked(tokenizer, ids, true), add_bos, parse_special);
  return 0;
}
