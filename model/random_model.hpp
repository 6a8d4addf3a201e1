#pragma once

#include <cstdint>
#include <string>

#include "model/tensor_type.hpp"

namespace caflm {

/// The shape of a random-weight model for tests, demos and benchmarks.
struct RandomModelSpec {
  /// "llama" or "qwen2".
  std::string architecture = "llama";
  std::uint32_t dim = 64;
  std::uint32_t n_layers = 2;
  std::uint32_t n_heads = 4;
  std::uint32_t n_kv_heads = 2;
  std::uint32_t ffn_dim = 192;
  std::uint32_t context_length = 2048;
  TensorType type = TensorType::F32;
  /// No `output.weight`: the output projection reuses the token embedding.
  bool tied_embeddings = false;
  std::uint64_t seed = 1;
  /// A GGUF file whose tokenizer to copy; empty builds a small byte-level
  /// BPE vocabulary.
  std::string vocabulary_path;
};

/// Writes a GGUF v3 model of `spec`'s shape with seeded random weights:
/// the same spec always gives the same file. Matrices are stored as
/// `spec.type`; norms and biases stay F32 as converters write them.
/// Throws std::invalid_argument for an impossible shape.
void write_random_model(const RandomModelSpec& spec, const std::string& path);

} // namespace caflm
