#pragma once

#include <memory>
#include <string>

#include "model/gguf.hpp"
#include "model/model_config.hpp"
#include "model/model_weights.hpp"
#include "model/tokenizer.hpp"

namespace caflm {

/// A loaded GGUF model: the mapped file, its configuration, its weights
/// (pointing into the mapping) and its tokenizer. Immutable once loaded, so
/// replicas in one process share it.
class Model {
 public:
  /// Maps and checks `path`; throws GgufError (or std::runtime_error for a
  /// bad vocabulary) with a message naming what is wrong.
  static std::shared_ptr<const Model> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  /// Distinguishes this model's prefix-cache keys from another model's.
  std::uint64_t cache_salt() const { return cache_salt_; }

 private:
  explicit Model(GgufFile file);

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::uint64_t cache_salt_;
};

} // namespace caflm
