#pragma once

#include <cstdint>
#include <string>

#include "caflm/gguf/tensor_type.hpp"

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
};

class GgufFile;

/// Bytes of the tensors of a random model of `spec`'s shape over a
/// vocabulary of `vocab_size` tokens (the file is a little more). Throws
/// std::invalid_argument when the shape is impossible or the size
/// overflows.
std::uint64_t random_model_bytes(const RandomModelSpec& spec, std::uint64_t vocab_size);

/// Writes a GGUF v3 model of `spec`'s shape with seeded random weights: the
/// same spec and tokenizer always give the same file. The tokenizer is the
/// `tokenizer.*` metadata of `tokenizer` (a model, or a vocabulary-only file
/// such as llama.cpp's ggml-vocab-*.gguf), copied unchanged; its token count
/// is the vocabulary size. Matrices are stored as `spec.type`; norms and
/// biases stay F32 as converters write them. Written as GgufWriter::write
/// does: complete or not at all, never over a mapped file's bytes.
/// Throws std::invalid_argument for an impossible shape or a tokenizer
/// without tokens.
void write_random_model(const RandomModelSpec& spec, const GgufFile& tokenizer,
                        const std::string& path);

} // namespace caflm
