#pragma once

#include <memory>
#include <string>

#include "caflm/gguf/gguf.hpp"
#include "caflm/model/model_config.hpp"
#include "caflm/model/model_weights.hpp"

namespace caflm {

/// A loaded GGUF model: the mapped file, its configuration and its weights
/// (pointing into the mapping). Immutable once loaded, so replicas in one
/// process share it. Its tokenizer is read from `file()` by the text layer.
class Model {
 public:
  /// Maps and checks `path`; throws GgufError with a message naming what is
  /// wrong.
  static std::shared_ptr<const Model> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  /// The mapped file, for the metadata other layers read (the tokenizer).
  const GgufFile& file() const { return file_; }
  /// Distinguishes this model's prefix-cache keys from another model's.
  std::uint64_t cache_salt() const { return cache_salt_; }

 private:
  explicit Model(GgufFile file);

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::uint64_t cache_salt_;
};

} // namespace caflm
