#pragma once

// The model a demo runs: the GGUF file named on its command line, or a small
// random one when none is named.

#include <filesystem>
#include <memory>
#include <string>

#include "caflm/gguf/gguf.hpp"
#include "caflm/model/model.hpp"
#include "caflm/model/random_model.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm {

/// Writes a random model of `spec`'s shape to `path`, with the small
/// byte-level BPE vocabulary caflm builds in.
inline void write_demo_model(const RandomModelSpec& spec, const std::string& path) {
  write_random_model(spec, GgufFile::from_bytes(Vocabulary::byte_level_bpe().to_gguf()), path);
}

/// The model at `path`; when `path` is empty, a small random one (its text
/// is gibberish) written to the temp folder as `scratch_name` and removed
/// again once loaded.
inline std::shared_ptr<const Model> load_demo_model(const std::string& path,
                                                    const std::string& scratch_name) {
  if (!path.empty())
    return Model::load(path);
  RandomModelSpec spec;
  spec.dim = 64;
  spec.n_layers = 2;
  spec.context_length = 512;
  const auto file = std::filesystem::temp_directory_path() / scratch_name;
  write_demo_model(spec, file.string());
  auto model = Model::load(file.string());
  std::filesystem::remove(file); // the model keeps its mapping
  return model;
}

} // namespace caflm
