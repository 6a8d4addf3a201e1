#include "model/model.hpp"

#include <xxhash.h>

#include "model/vocabulary.hpp"

namespace caflm {

namespace {

/// A cheap fingerprint of the weights: shapes, types and the first bytes of
/// every tensor.
std::uint64_t fingerprint(const GgufFile& file) {
  std::uint64_t hash = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    hash = XXH3_64bits_withSeed(t.name.data(), t.name.size(), hash);
    hash = XXH3_64bits_withSeed(t.dims.data(), t.dims.size() * sizeof(t.dims[0]), hash);
    hash = XXH3_64bits_withSeed(t.data, std::min<std::uint64_t>(t.n_bytes, 256), hash);
  }
  return hash;
}

} // namespace

Model::Model(GgufFile file)
  : file_(std::move(file))
  , config_(ModelConfig::from_gguf(file_))
  , weights_(ModelWeights::from_gguf(file_, config_))
  , tokenizer_(std::make_shared<Tokenizer>(
        std::make_shared<const Vocabulary>(Vocabulary::from_gguf(file_))))
  , cache_salt_(fingerprint(file_)) {
  if (tokenizer_->vocabulary().size() > config_.vocab_size)
    throw GgufError("the tokenizer has more tokens than the model's embedding table");
}

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return std::shared_ptr<const Model>(new Model(GgufFile::open(path)));
}

} // namespace caflm
