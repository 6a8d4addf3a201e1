#pragma once

#include "caflm/text/pre_tokenizer.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace caflm {

/// A token id of the model's vocabulary. The layers beside this one (kv/,
/// sampling/) declare the same alias; redeclaring an identical alias is legal
/// C++, so their headers mix in any order.
using TokenId = std::uint32_t;

class GgufFile;
class GgufWriter;

/// The two tokenizer families caflm runs (tokenizer.ggml.model "llama" and "gpt2").
enum class TokenizerKind {
  Spm, ///< SentencePiece-style: score-driven merges over characters, byte-token fallback
  Bpe, ///< GPT-2 byte-level BPE: pre-tokenizer regex, then merges by rank
};

/// tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// Everything a Vocabulary is built from. Vocabulary::from_gguf() fills it from
/// GGUF metadata; tests and byte_level_bpe() fill it directly.
struct VocabularySpec {
  TokenizerKind kind = TokenizerKind::Spm;
  /// tokenizer.ggml.pre as written; empty when absent. Missing and unknown names
  /// mean PreTokenizer::Default, as in llama.cpp (see pre_tokenizer_warning()).
  std::string pre_tokenizer_name;
  /// general.name of the model, if known: llama.cpp gives some models' special
  /// tokens strip attributes by name (Phi-3: rstrip).
  std::string model_name;
  std::vector<std::string> tokens;
  std::vector<float> scores;       ///< one per token, or empty (all 0)
  std::vector<TokenType> types;    ///< one per token, or empty (all Normal)
  std::vector<std::string> merges; ///< BPE: "left right", ranked by position
  std::optional<TokenId> bos, eos, unk, pad, eot;
  // Unset flags take llama.cpp's defaults for the kind: SPM adds BOS and a space
  // prefix; BPE adds neither (except BOS for the Llama 3 pre-tokenizer).
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  /// Tokens that, when matched as special tokens in text, also swallow the ASCII
  /// whitespace before them (lstrip) or after them (rstrip); added to the
  /// per-model rules. GGUF has no key for these, so write_gguf_metadata() does
  /// not keep them.
  std::vector<TokenId> lstrip, rstrip;
};

/// A tokenizer vocabulary: token texts, scores and types, merges and special
/// tokens. Immutable once built; share it as std::shared_ptr<const Vocabulary>.
class Vocabulary {
 public:
  /// Validates `spec` (sizes agree, special ids in range, token texts unique,
  /// merges well formed) and builds the lookup tables. Throws std::runtime_error
  /// saying what is wrong.
  explicit Vocabulary(VocabularySpec spec);

  /// Reads the tokenizer.* metadata of a GGUF file. Throws GgufError for values
  /// of the wrong type and std::runtime_error for missing or inconsistent ones.
  static Vocabulary from_gguf(const GgufFile& file);

  /// A small byte-level BPE vocabulary for test models: the 256 byte tokens (id =
  /// byte value), up to `max_merges` merges learned from a built-in English text,
  /// then the control tokens <s> (BOS) and </s> (EOS).
  static Vocabulary byte_level_bpe(size_t max_merges = 300);
  /// The same, learning merges from `training_text`.
  static Vocabulary byte_level_bpe(std::string_view training_text, size_t max_merges);

  /// Writes the tokenizer.* keys that from_gguf() reads back.
  void write_gguf_metadata(GgufWriter& writer) const;
  /// A vocabulary-only GGUF file image (those keys, no tensors), as
  /// llama.cpp's ggml-vocab-*.gguf files are.
  std::vector<uint8_t> to_gguf() const;

  // Views into token texts are stored in the lookup map, so a copy would dangle.
  Vocabulary(Vocabulary&&) = default;
  Vocabulary& operator=(Vocabulary&&) = default;
  Vocabulary(const Vocabulary&) = delete;
  Vocabulary& operator=(const Vocabulary&) = delete;
  ~Vocabulary() = default;

  TokenizerKind kind() const { return kind_; }
  PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }
  /// tokenizer.ggml.pre as given ("" when absent).
  const std::string& pre_tokenizer_name() const { return pre_tokenizer_name_; }
  /// For a byte-level BPE vocabulary whose tokenizer.ggml.pre is missing or not
  /// one caflm knows: a warning naming it and the fallback used. Empty otherwise.
  /// (The text layer has no logger; the engine logs this when it loads a model.)
  const std::string& pre_tokenizer_warning() const { return pre_tokenizer_warning_; }
  size_t size() const { return tokens_.size(); }

  /// The token's text as stored in the vocabulary (SPM: spaces as U+2581; BPE:
  /// GPT-2's byte-level alphabet). Throws std::out_of_range for a bad id.
  std::string_view token_text(TokenId id) const { return entry(id).text; }
  float token_score(TokenId id) const { return entry(id).score; }
  TokenType token_type(TokenId id) const { return entry(id).type; }
  /// Whether a match of this special token in text removes the ASCII whitespace
  /// right before it (lstrip) or right after it (rstrip), as llama.cpp's
  /// LLAMA_TOKEN_ATTR_LSTRIP / _RSTRIP.
  bool token_lstrip(TokenId id) const { return entry(id).lstrip; }
  bool token_rstrip(TokenId id) const { return entry(id).rstrip; }
  /// The token whose text is exactly `text`, if any.
  std::optional<TokenId> find(std::string_view text) const;

  std::optional<TokenId> bos() const { return bos_; }
  std::optional<TokenId> eos() const { return eos_; }
  std::optional<TokenId> eot() const { return eot_; }
  std::optional<TokenId> unk() const { return unk_; }
  std::optional<TokenId> pad() const { return pad_; }
  /// Whether prompts for this model should start with BOS.
  bool add_bos() const { return add_bos_; }
  /// Whether the model's own tokenizer appends EOS; encode() does not.
  bool add_eos() const { return add_eos_; }
  /// SPM: whether encoding puts a space before the text (and decoding removes it).
  bool add_space_prefix() const { return add_space_prefix_; }
  /// Llama 3 style: a word that is itself a token skips the merges.
  bool ignore_merges() const { return ignore_merges_; }

  /// End of generation: EOS, EOT, and the tokens llama.cpp recognises by text
  /// (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, <EOT>).
  bool is_eog(TokenId id) const;
  bool is_control(TokenId id) const { return token_type(id) == TokenType::Control; }

  /// BPE: rank of the merge of `left` and `right` (lower merges first), if any.
  std::optional<uint32_t> merge_rank(std::string_view left, std::string_view right) const;
  const std::vector<std::string>& merges() const { return merges_; }

  /// SPM byte fallback: the token for a raw byte (<0xAB>, else the one-byte
  /// token, else UNK); nullopt when the vocabulary has none of them.
  std::optional<TokenId> byte_token(uint8_t byte) const;

  /// Tokens matched literally in input text before tokenizing (control, unknown and
  /// user-defined ones with non-empty text), longest first.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }

 private:
  struct Entry {
    std::string text;
    float score;
    TokenType type;
    bool lstrip = false;
    bool rstrip = false;
  };

  const Entry& entry(TokenId id) const;
  static std::string merge_key(std::string_view left, std::string_view right);

  TokenizerKind kind_;
  PreTokenizer pre_tokenizer_;
  std::string pre_tokenizer_name_;
  std::string pre_tokenizer_warning_;
  std::vector<Entry> tokens_;
  // Keys view tokens_[i].text; tokens_ never grows after construction, and a
  // moved vector keeps its element storage, so the views stay valid.
  std::unordered_map<std::string_view, TokenId> token_ids_;
  std::vector<std::string> merges_;
  std::unordered_map<std::string, uint32_t> merge_ranks_; // merge_key(left, right) -> rank
  std::optional<TokenId> bos_, eos_, unk_, pad_, eot_;
  bool add_bos_;
  bool add_eos_;
  bool add_space_prefix_;
  bool ignore_merges_;
  std::vector<TokenId> eog_tokens_; // sorted
  std::array<std::optional<TokenId>, 256> byte_tokens_;
  std::vector<TokenId> special_tokens_;
};

} // namespace caflm
