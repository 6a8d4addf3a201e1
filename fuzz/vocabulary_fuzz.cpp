// libFuzzer target for the tokenizer metadata of a model file: the input is a
// GGUF image, read with Vocabulary::from_gguf() and made into a Tokenizer, as
// loading an untrusted model does. What must hold, for any input:
// - reading throws only GgufError or std::runtime_error (both name what is
//   wrong); no other exception, crash, sanitizer report, hang or oversized
//   allocation;
// - a vocabulary that loads tokenizes a few fixed texts (special tokens parsed
//   or not) into ids inside it, decodes them and every single token to valid
//   UTF-8, and writes itself back to a GGUF image that loads again with the
//   same size and tokenizer kind.
// See fuzz/CMakeLists.txt for how to build and run it.
//
// With CAFLM_FUZZ_SEEDS_OUT=DIR set it writes a seed corpus (small SPM and BPE
// vocabularies as GGUF images) to DIR and exits.

#include "caflm/gguf/gguf.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/unicode.hpp"
#include "caflm/text/vocabulary.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using caflm::TokenId;

constexpr std::string_view kTexts[] = {
    "Hello world",
    " leading and  double  spaces\n\nnew lines\t",
    "<s>special</s> <unk> <|endoftext|>",
    "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80 \xE2\x96\x81",
    "broken \xC3 \xFF\x80 bytes",
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "vocabulary_fuzz: %s\n", what);
  std::abort();
}

void check(const caflm::Tokenizer& tokenizer) {
  const caflm::Vocabulary& vocabulary = tokenizer.vocabulary();
  for (std::string_view text : kTexts) {
    for (bool parse_special : {false, true}) {
      const std::vector<TokenId> ids = tokenizer.tokenize(text, true, parse_special);
      for (TokenId id : ids) {
        if (id >= vocabulary.size()) {
          fail("tokenize gave an id outside the vocabulary");
        }
      }
      const std::string decoded = tokenizer.decode(ids);
      if (caflm::unicode::sanitize_utf8(decoded) != decoded) {
        fail("decode gave invalid UTF-8");
      }
    }
  }
  for (TokenId id = 0; id < vocabulary.size(); ++id) {
    const std::string decoded = tokenizer.decode({id}, false);
    if (caflm::unicode::sanitize_utf8(decoded) != decoded) {
      fail("decode of one token gave invalid UTF-8");
    }
  }
  const std::vector<uint8_t> image = vocabulary.to_gguf();
  const caflm::Vocabulary reread =
      caflm::Vocabulary::from_gguf(caflm::GgufFile::from_memory(image.data(), image.size()));
  if (reread.size() != vocabulary.size() || reread.kind() != vocabulary.kind()) {
    fail("a vocabulary written back to GGUF reads differently");
  }
}

void save(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "vocabulary_fuzz: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

/// A small SentencePiece-style vocabulary: control tokens, byte tokens, a few
/// words and a user-defined token.
caflm::Vocabulary small_spm() {
  caflm::VocabularySpec spec;
  spec.kind = caflm::TokenizerKind::Spm;
  const auto add = [&spec](std::string text, float score, caflm::TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.types.push_back(type);
  };
  add("<unk>", 0.0f, caflm::TokenType::Unknown);
  add("<s>", 0.0f, caflm::TokenType::Control);
  add("</s>", 0.0f, caflm::TokenType::Control);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    add(std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">", 0.0f, caflm::TokenType::Byte);
  }
  float score = -1.0f;
  for (const char* word : {"\xE2\x96\x81", "\xE2\x96\x81H", "\xE2\x96\x81Hello", "e", "l", "o", "H",
                           "w", "r", "d", "\xE2\x96\x81w", "\xE2\x96\x81world"}) {
    add(word, score, caflm::TokenType::Normal);
    score -= 1.0f;
  }
  add("<tool>", 0.0f, caflm::TokenType::UserDefined);
  spec.unk = 0;
  spec.bos = 1;
  spec.eos = 2;
  return caflm::Vocabulary(std::move(spec));
}

void write_seeds(const std::string& dir) {
  save(dir + "/spm.gguf", small_spm().to_gguf());
  save(dir + "/bpe-40.gguf", caflm::Vocabulary::byte_level_bpe(40).to_gguf());
  save(dir + "/bpe-5.gguf", caflm::Vocabulary::byte_level_bpe(5).to_gguf());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CAFLM_FUZZ_SEEDS_OUT")) {
    try {
      write_seeds(dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vocabulary_fuzz: cannot make the seeds: %s\n", e.what());
      std::exit(1);
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<caflm::Tokenizer> tokenizer;
  try {
    const caflm::GgufFile file = caflm::GgufFile::from_memory(data, size);
    tokenizer = std::make_unique<caflm::Tokenizer>(
        std::make_shared<const caflm::Vocabulary>(caflm::Vocabulary::from_gguf(file)));
  } catch (const std::runtime_error&) {
    return 0; // GgufError is one: the file or its tokenizer metadata is refused
  }
  check(*tokenizer);
  return 0;
}
