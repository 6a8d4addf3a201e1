#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace caflm {

/// How byte-level BPE cuts text into words before merging (tokenizer.ggml.pre).
/// Each is llama.cpp's list of regexes for the name, applied in sequence: every
/// regex cuts each piece the previous ones produced into its matches and the
/// text between them, both kept as pieces.
enum class PreTokenizer {
  /// llama.cpp's fallback for missing or unknown names: [\p{P}\$\+<=>\^~\|]+,
  /// then Gpt2's regex, then \p{N}+, then [0-9][0-9][0-9].
  Default,
  /// GPT-2 (also MPT, GPT-NeoX, OLMo, Jais, Phi-2...):
  /// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  Gpt2,
  /// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  ///          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  /// Qwen 2: as Llama3, but \p{N} (every digit a word of its own) for \p{N}{1,3}.
  Qwen2,
  /// StarCoder, SmolLM, Refact, Command-R...: \p{N}, then Gpt2's regex.
  DigitsThenGpt2,
  /// Falcon: [\p{P}\$\+<=>\^~\|`]+, then Gpt2's regex, then [0-9][0-9][0-9].
  Falcon,
  /// DeepSeek LLM: [\r\n], \s?[cased letters]+, \s?[ASCII and full-width
  /// punctuation]+, \s+$, [CJK]+, \p{N}+.
  DeepseekLlm,
  /// DeepSeek Coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N}.
  DeepseekCoder,
};

/// What llama.cpp makes of a tokenizer.ggml.pre name.
struct PreTokenizerChoice {
  PreTokenizer pre_tokenizer = PreTokenizer::Default;
  /// Whether the name is one caflm knows; unknown and missing names fall back
  /// to Default, as in llama.cpp.
  bool known = false;
  /// Llama 3 style: a word that is itself a token skips the merges, and BOS is
  /// added unless the file says otherwise.
  bool llama3_family = false;
};

/// The pre-tokenizer for a tokenizer.ggml.pre name ("" when the key is absent).
PreTokenizerChoice pre_tokenizer_from_name(std::string_view name);

/// A readable name of `pre_tokenizer`, for messages ("default", "gpt-2", ...).
std::string_view pre_tokenizer_name(PreTokenizer pre_tokenizer);

/// The words of `code_points` under `pre_tokenizer`, as lengths in code points
/// (they add up to code_points.size(); none is 0).
std::vector<size_t> split_words(PreTokenizer pre_tokenizer,
                                const std::vector<uint32_t>& code_points);

/// The words byte-level BPE merges within, as UTF-8 (invalid input bytes come
/// out as U+FFFD, as llama.cpp reads them). Exposed for tests and for training
/// byte-level vocabularies.
std::vector<std::string> pre_tokenize(PreTokenizer pre_tokenizer, std::string_view text);

} // namespace caflm
