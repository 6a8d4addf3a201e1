#include "caflm/model/model.hpp"

#include <xxhash.h>

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
  , cache_salt_(fingerprint(file_)) {}

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return std::shared_ptr<const Model>(new Model(GgufFile::open(path)));
}

} // namespace caflm
