#include "caflm/text/vocabulary.hpp"

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

namespace caflm {

namespace {

// The warning for a byte-level BPE vocabulary whose pre-tokenizer name is not
// known, naming the fallback; empty when the name is known.
std::string pre_tokenizer_warning_for(std::string_view name, const PreTokenizerChoice& choice) {
  if (choice.known) {
    return "";
  }
  const std::string what =
      name.empty()
          ? std::string("the vocabulary has no tokenizer.ggml.pre")
          : fmt::format("tokenizer.ggml.pre '{}' is not a pre-tokenizer caflm knows", name);
  return fmt::format("{}; using llama.cpp's fallback '{}' (punctuation runs, then GPT-2's regex, "
                     "then numbers in groups of three), which may split words differently "
                     "from the model's own tokenizer",
                     what, pre_tokenizer_name(choice.pre_tokenizer));
}

bool contains_any(std::string_view text, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts) {
    if (text.find(part) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

// Token texts llama.cpp treats as end-of-turn when no eot id is given, in the
// order they are tried.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", // DeepSeek
};

// Token texts that end generation whatever the metadata says.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
};

TokenType token_type_from_int(int64_t value) {
  if (value < static_cast<int64_t>(TokenType::Undefined) ||
      value > static_cast<int64_t>(TokenType::Byte)) {
    return TokenType::Undefined;
  }
  return static_cast<TokenType>(value);
}

std::optional<TokenId> read_token_id(const GgufFile& file, std::string_view key) {
  const std::optional<uint64_t> value = file.get_uint(key);
  if (!value) {
    return std::nullopt;
  }
  if (*value > UINT32_MAX) {
    throw std::runtime_error(fmt::format("{} = {} is not a token id", key, *value));
  }
  return static_cast<TokenId>(*value);
}

// A short English text for byte_level_bpe(); its merges give test models a
// vocabulary where common words are single tokens.
constexpr std::string_view kBuiltinTrainingText =
    "The quick brown fox jumps over the lazy dog. Once upon a time, there was a little town "
    "by the sea where the people worked, talked and sang together. Every morning the "
    "fishermen went out on their boats, and every evening they came home with the day's "
    "catch. The children played on the sand while their mothers and fathers mended the nets. "
    "It was a quiet and happy place, and nobody there wanted to be anywhere else. "
    "One day a stranger came to the town. He said that he had walked for many days and that "
    "he was looking for a home. The people gave him food and a place to sleep, and they asked "
    "him what he could do. He told them that he could tell stories, and that evening he told "
    "the first of many. He spoke of mountains and rivers, of kings and queens, of cities "
    "where the streets were made of gold and of forests where the trees could talk. "
    "The people listened, and they were happy that the stranger had come. "
    "Hello world! How are you today? I am fine, thank you. What is your name? My name is "
    "Alice, and this is my friend Bob. We are learning how language models read and write "
    "text: first the text is cut into tokens, then every token becomes a number, and the "
    "model predicts which number comes next. 1 2 3 4 5 6 7 8 9 10 100 1000 2024 2025.";

} // namespace

Vocabulary::Vocabulary(VocabularySpec spec)
  : kind_(spec.kind)
  , pre_tokenizer_name_(std::move(spec.pre_tokenizer_name)) {
  const PreTokenizerChoice pre_choice = pre_tokenizer_from_name(pre_tokenizer_name_);
  pre_tokenizer_ = pre_choice.pre_tokenizer;
  if (kind_ == TokenizerKind::Bpe) {
    pre_tokenizer_warning_ = pre_tokenizer_warning_for(pre_tokenizer_name_, pre_choice);
  }
  const size_t n_tokens = spec.tokens.size();
  if (n_tokens == 0) {
    throw std::runtime_error("vocabulary has no tokens");
  }
  if (n_tokens > UINT32_MAX) {
    throw std::runtime_error(fmt::format("vocabulary has {} tokens, too many", n_tokens));
  }
  if (!spec.scores.empty() && spec.scores.size() != n_tokens) {
    throw std::runtime_error(
        fmt::format("vocabulary has {} tokens but {} scores", n_tokens, spec.scores.size()));
  }
  if (!spec.types.empty() && spec.types.size() != n_tokens) {
    throw std::runtime_error(
        fmt::format("vocabulary has {} tokens but {} token types", n_tokens, spec.types.size()));
  }

  tokens_.reserve(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    tokens_.push_back(Entry{std::move(spec.tokens[i]), spec.scores.empty() ? 0.0f : spec.scores[i],
                            spec.types.empty() ? TokenType::Normal : spec.types[i]});
  }
  token_ids_.reserve(n_tokens);
  for (TokenId id = 0; id < n_tokens; ++id) {
    const std::string& text = tokens_[id].text;
    // An empty text can never be matched; llama.cpp renames such tokens, caflm skips them.
    if (text.empty()) {
      continue;
    }
    if (!token_ids_.emplace(text, id).second) {
      throw std::runtime_error(
          fmt::format("vocabulary has the token text '{}' twice (ids {} and {})", text,
                      token_ids_.at(text), id));
    }
  }

  const bool spm = kind_ == TokenizerKind::Spm;
  // llama.cpp's defaults for SentencePiece vocabularies without these keys.
  if (spm) {
    const auto default_id = [&](std::optional<TokenId>& id, TokenId fallback) {
      if (!id && fallback < n_tokens) {
        id = fallback;
      }
    };
    default_id(spec.bos, 1);
    default_id(spec.eos, 2);
    default_id(spec.unk, 0);
  }
  const auto check_id = [&](const std::optional<TokenId>& id, const char* what) {
    if (id && *id >= n_tokens) {
      throw std::runtime_error(fmt::format("{} token id {} is outside the vocabulary of {} tokens",
                                           what, *id, n_tokens));
    }
    return id;
  };
  bos_ = check_id(spec.bos, "BOS");
  eos_ = check_id(spec.eos, "EOS");
  unk_ = check_id(spec.unk, "unknown");
  pad_ = check_id(spec.pad, "padding");
  eot_ = check_id(spec.eot, "EOT");

  const bool llama3_family = pre_choice.llama3_family;
  add_bos_ = spec.add_bos.value_or((spm || (kind_ == TokenizerKind::Bpe && llama3_family)) &&
                                   bos_.has_value());
  add_eos_ = spec.add_eos.value_or(false);
  add_space_prefix_ = spec.add_space_prefix.value_or(spm);
  ignore_merges_ = kind_ == TokenizerKind::Bpe && llama3_family;
  if (add_bos_ && !bos_) {
    throw std::runtime_error("vocabulary asks to add BOS but has no BOS token");
  }
  if (add_eos_ && !eos_) {
    throw std::runtime_error("vocabulary asks to add EOS but has no EOS token");
  }

  // End of generation, found by text as llama.cpp does, since converters often
  // leave the eot id out. Tokens found this way become control tokens, as there.
  const auto find_by_text = [&](std::string_view text) {
    const std::optional<TokenId> id = find(text);
    if (id) {
      tokens_[*id].type = TokenType::Control;
    }
    return id;
  };
  if (!eot_) {
    for (std::string_view text : kEotTexts) {
      if ((eot_ = find_by_text(text))) {
        break;
      }
    }
  }
  for (const std::optional<TokenId>& id : {eos_, eot_}) {
    if (id) {
      eog_tokens_.push_back(*id);
    }
  }
  for (std::string_view text : kEogTexts) {
    if (const std::optional<TokenId> id = find_by_text(text)) {
      eog_tokens_.push_back(*id);
    }
  }
  std::sort(eog_tokens_.begin(), eog_tokens_.end());
  eog_tokens_.erase(std::unique(eog_tokens_.begin(), eog_tokens_.end()), eog_tokens_.end());

  if (kind_ == TokenizerKind::Bpe) {
    if (spec.merges.empty()) {
      throw std::runtime_error("byte-level BPE vocabulary has no merges");
    }
    merges_ = std::move(spec.merges);
    merge_ranks_.reserve(merges_.size());
    for (size_t rank = 0; rank < merges_.size(); ++rank) {
      const std::string& merge = merges_[rank];
      // Split at the first space after the first character, as llama.cpp does, so a
      // left part may itself be a space.
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) {
        throw std::runtime_error(
            fmt::format("merge {} ('{}') is not two parts separated by a space", rank, merge));
      }
      const std::string_view merge_view = merge;
      // The first of duplicate merges keeps its (lower) rank.
      merge_ranks_.emplace(merge_key(merge_view.substr(0, space), merge_view.substr(space + 1)),
                           static_cast<uint32_t>(rank));
    }
  } else {
    for (uint32_t byte = 0; byte < 256; ++byte) {
      std::optional<TokenId> id = find(fmt::format("<0x{:02X}>", byte));
      if (!id) {
        id = find(std::string(1, static_cast<char>(byte)));
      }
      byte_tokens_[byte] = id ? id : unk_;
    }
  }

  // gpt-oss: llama.cpp always renders these, as user-defined tokens.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const std::optional<TokenId> id = find(text)) {
      tokens_[*id].type = TokenType::UserDefined;
    }
  }

  for (TokenId id = 0; id < n_tokens; ++id) {
    const TokenType type = tokens_[id].type;
    if (!tokens_[id].text.empty() && (type == TokenType::Control || type == TokenType::Unknown ||
                                      type == TokenType::UserDefined)) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](TokenId a, TokenId b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });

  // Strip attributes: GGUF has none, so llama.cpp sets them by model name.
  std::string model_name = spec.model_name;
  std::transform(model_name.begin(), model_name.end(), model_name.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  const auto set_by_text = [&](std::string_view text, bool Entry::*attribute, bool value) {
    if (const std::optional<TokenId> id = find(text)) {
      tokens_[*id].*attribute = value;
    }
  };
  if (contains_any(pre_tokenizer_name_, {"jina-v2-de", "jina-v2-es", "jina-v2-code"})) {
    set_by_text("<mask>", &Entry::lstrip, true);
  } else if (contains_any(model_name, {"phi-3", "phi3"})) {
    // Phi-3's chat tokens (<|end|>, <|user|>, ...) eat the newline after them.
    for (TokenId id : special_tokens_) {
      tokens_[id].rstrip = true;
    }
    set_by_text("</s>", &Entry::rstrip, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      set_by_text(text, &Entry::rstrip, false);
    }
  }
  const auto set_by_id = [&](const std::vector<TokenId>& ids, bool Entry::*attribute,
                             const char* what) {
    for (TokenId id : ids) {
      if (id >= n_tokens) {
        throw std::runtime_error(fmt::format(
            "{} token id {} is outside the vocabulary of {} tokens", what, id, n_tokens));
      }
      tokens_[id].*attribute = true;
    }
  };
  set_by_id(spec.lstrip, &Entry::lstrip, "lstrip");
  set_by_id(spec.rstrip, &Entry::rstrip, "rstrip");
}

Vocabulary Vocabulary::from_gguf(const GgufFile& file) {
  VocabularySpec spec;
  const std::optional<std::string_view> model = file.get_string("tokenizer.ggml.model");
  if (!model) {
    throw std::runtime_error("GGUF file has no tokenizer.ggml.model");
  }
  if (*model == "llama") {
    spec.kind = TokenizerKind::Spm;
  } else if (*model == "gpt2") {
    spec.kind = TokenizerKind::Bpe;
  } else {
    throw std::runtime_error(fmt::format(
        "tokenizer.ggml.model '{}' is not supported (caflm reads 'llama' and 'gpt2')", *model));
  }
  spec.pre_tokenizer_name = std::string(file.get_string("tokenizer.ggml.pre").value_or(""));
  spec.model_name = std::string(file.get_string("general.name").value_or(""));

  const auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) {
    throw std::runtime_error("GGUF file has no tokenizer.ggml.tokens");
  }
  spec.tokens.assign(tokens->begin(), tokens->end());
  if (auto scores = file.get_float_array("tokenizer.ggml.scores")) {
    spec.scores = std::move(*scores);
  }
  if (const auto types = file.get_int_array("tokenizer.ggml.token_type")) {
    spec.types.reserve(types->size());
    for (int64_t type : *types) {
      spec.types.push_back(token_type_from_int(type));
    }
  }
  if (spec.kind == TokenizerKind::Bpe) {
    const auto merges = file.get_string_array("tokenizer.ggml.merges");
    if (!merges) {
      throw std::runtime_error("GGUF file with a gpt2 tokenizer has no tokenizer.ggml.merges");
    }
    spec.merges.assign(merges->begin(), merges->end());
  }

  spec.bos = read_token_id(file, "tokenizer.ggml.bos_token_id");
  spec.eos = read_token_id(file, "tokenizer.ggml.eos_token_id");
  spec.unk = read_token_id(file, "tokenizer.ggml.unknown_token_id");
  spec.pad = read_token_id(file, "tokenizer.ggml.padding_token_id");
  spec.eot = read_token_id(file, "tokenizer.ggml.eot_token_id");
  spec.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  spec.add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  spec.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix");
  return Vocabulary(std::move(spec));
}

Vocabulary Vocabulary::byte_level_bpe(size_t max_merges) {
  return byte_level_bpe(kBuiltinTrainingText, max_merges);
}

Vocabulary Vocabulary::byte_level_bpe(std::string_view training_text, size_t max_merges) {
  VocabularySpec spec;
  spec.kind = TokenizerKind::Bpe;
  spec.pre_tokenizer_name = "gpt-2";
  for (uint32_t byte = 0; byte < 256; ++byte) {
    std::string text;
    unicode::append_utf8(text, unicode::byte_to_byte_level(static_cast<uint8_t>(byte)));
    spec.tokens.push_back(std::move(text));
  }
  std::unordered_map<std::string, TokenId> ids;
  for (TokenId id = 0; id < spec.tokens.size(); ++id) {
    ids.emplace(spec.tokens[id], id);
  }

  // Each distinct word of the text as a sequence of token ids, with its count.
  std::map<std::vector<TokenId>, size_t> word_counts;
  for (const std::string& word : pre_tokenize(PreTokenizer::Gpt2, training_text)) {
    std::vector<TokenId> symbols(word.begin(), word.end());
    for (TokenId& symbol : symbols) {
      symbol &= 0xFF; // the byte value (char may be signed)
    }
    ++word_counts[symbols];
  }
  std::vector<std::pair<std::vector<TokenId>, size_t>> words(word_counts.begin(),
                                                             word_counts.end());

  while (spec.merges.size() < max_merges) {
    // The most frequent adjacent pair; ties go to the smallest ids, so training is
    // deterministic.
    std::map<std::pair<TokenId, TokenId>, size_t> pair_counts;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 1; i < symbols.size(); ++i) {
        pair_counts[{symbols[i - 1], symbols[i]}] += count;
      }
    }
    auto best = pair_counts.end();
    for (auto it = pair_counts.begin(); it != pair_counts.end(); ++it) {
      if (best == pair_counts.end() || it->second > best->second) {
        best = it;
      }
    }
    // A pair seen once teaches nothing about the language.
    if (best == pair_counts.end() || best->second < 2) {
      break;
    }
    const auto [left, right] = best->first;
    const std::string merged_text = spec.tokens[left] + spec.tokens[right];
    const auto [merged_it, added] =
        ids.emplace(merged_text, static_cast<TokenId>(spec.tokens.size()));
    if (added) {
      spec.tokens.push_back(merged_text);
    }
    const TokenId merged = merged_it->second;
    spec.merges.push_back(spec.tokens[left] + " " + spec.tokens[right]);

    for (auto& [symbols, count] : words) {
      std::vector<TokenId> rewritten;
      rewritten.reserve(symbols.size());
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          rewritten.push_back(merged);
          ++i;
        } else {
          rewritten.push_back(symbols[i]);
        }
      }
      symbols = std::move(rewritten);
    }
  }

  spec.types.assign(spec.tokens.size(), TokenType::Normal);
  spec.bos = static_cast<TokenId>(spec.tokens.size());
  spec.tokens.emplace_back("<s>");
  spec.eos = static_cast<TokenId>(spec.tokens.size());
  spec.tokens.emplace_back("</s>");
  spec.types.resize(spec.tokens.size(), TokenType::Control);
  spec.add_bos = true;
  spec.add_eos = false;
  return Vocabulary(std::move(spec));
}

std::vector<uint8_t> Vocabulary::to_gguf() const {
  GgufWriter writer;
  write_gguf_metadata(writer);
  return writer.to_bytes();
}

void Vocabulary::write_gguf_metadata(GgufWriter& writer) const {
  writer.add_string("tokenizer.ggml.model", kind_ == TokenizerKind::Spm ? "llama" : "gpt2");
  if (!pre_tokenizer_name_.empty()) {
    writer.add_string("tokenizer.ggml.pre", pre_tokenizer_name_);
  }
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  texts.reserve(tokens_.size());
  scores.reserve(tokens_.size());
  types.reserve(tokens_.size());
  for (const Entry& token : tokens_) {
    texts.push_back(token.text);
    scores.push_back(token.score);
    types.push_back(static_cast<int32_t>(token.type));
  }
  writer.add_string_array("tokenizer.ggml.tokens", texts);
  writer.add_float_array("tokenizer.ggml.scores", scores);
  writer.add_int32_array("tokenizer.ggml.token_type", types);
  if (kind_ == TokenizerKind::Bpe) {
    writer.add_string_array("tokenizer.ggml.merges", merges_);
  }
  const auto add_id = [&](const char* key, const std::optional<TokenId>& id) {
    if (id) {
      writer.add_uint32(key, *id);
    }
  };
  add_id("tokenizer.ggml.bos_token_id", bos_);
  add_id("tokenizer.ggml.eos_token_id", eos_);
  add_id("tokenizer.ggml.unknown_token_id", unk_);
  add_id("tokenizer.ggml.padding_token_id", pad_);
  add_id("tokenizer.ggml.eot_token_id", eot_);
  writer.add_bool("tokenizer.ggml.add_bos_token", add_bos_);
  writer.add_bool("tokenizer.ggml.add_eos_token", add_eos_);
  writer.add_bool("tokenizer.ggml.add_space_prefix", add_space_prefix_);
}

std::optional<TokenId> Vocabulary::find(std::string_view text) const {
  const auto it = token_ids_.find(text);
  if (it == token_ids_.end()) {
    return std::nullopt;
  }
  return it->second;
}

bool Vocabulary::is_eog(TokenId id) const {
  return std::binary_search(eog_tokens_.begin(), eog_tokens_.end(), id);
}

std::optional<uint32_t> Vocabulary::merge_rank(std::string_view left,
                                               std::string_view right) const {
  const auto it = merge_ranks_.find(merge_key(left, right));
  if (it == merge_ranks_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::optional<TokenId> Vocabulary::byte_token(uint8_t byte) const {
  return byte_tokens_[byte];
}

const Vocabulary::Entry& Vocabulary::entry(TokenId id) const {
  if (id >= tokens_.size()) {
    throw std::out_of_range(
        fmt::format("token id {} is outside the vocabulary of {} tokens", id, tokens_.size()));
  }
  return tokens_[id];
}

std::string Vocabulary::merge_key(std::string_view left, std::string_view right) {
  // Length-prefixed, so no choice of texts can make two different pairs collide.
  const auto left_size = static_cast<uint32_t>(left.size());
  std::string key;
  key.reserve(sizeof(left_size) + left.size() + right.size());
  key.append(reinterpret_cast<const char*>(&left_size), sizeof(left_size));
  key.append(left);
  key.append(right);
  return key;
}

} // namespace caflm
