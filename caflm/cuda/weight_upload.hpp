#pragma once

// Where each weight of a model goes in one device arena, planned on the host
// before anything is allocated, so a runner can size its memory first
// (`--gpu-memory`: the weights, then a workspace, the KV cache from what
// remains). Plain C++: no CUDA headers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm {
struct ModelWeights;
} // namespace caflm

namespace caflm::cuda {

/// Alignment of every tensor in the arena: more than the 16 bytes the GEMM's
/// vector loads need, and what cudaMalloc itself guarantees.
inline constexpr std::uint64_t kWeightArenaAlignment = 256;

/// One tensor to copy into the arena.
struct WeightUpload {
  /// GGUF-style name: "token_embd", "output_norm", "output", "rope_freqs",
  /// "rope_factors_long", "rope_factors_short", "blk.<i>.attn_q", ...
  std::string name;
  /// The bytes to copy: a matrix's GGUF bytes in the mapped file, or a
  /// vector's F32 copy in ModelWeights.
  const void* host_data;
  /// Where the tensor starts in the arena (a multiple of the alignment).
  std::uint64_t device_offset;
  std::uint64_t bytes;
  /// The stored type; F32 for the vectors (norms, biases, RoPE factors).
  TensorType type;
  std::uint64_t rows; // 1 for a vector
  std::uint64_t cols;
  /// True for a matrix copied as its GGUF bytes (dequantized by the GEMM);
  /// false for an F32 vector ModelWeights decoded on load.
  bool matrix;
  /// True when the tensor is the same bytes as an earlier entry (the output
  /// projection of a model with tied embeddings): it shares that entry's
  /// offset, takes no space of its own and is not copied again.
  bool alias;
};

/// Every tensor of a model and where it goes, in a fixed order: the token
/// embedding, the output norm and projection, the RoPE factors present, then
/// each layer's tensors in LayerWeights order. Absent optional vectors
/// (biases, q/k norms) have no entry.
struct WeightUploadPlan {
  std::vector<WeightUpload> tensors;
  std::uint64_t alignment = kWeightArenaAlignment;
  /// Bytes the arena needs: the end of the last tensor, rounded up to the
  /// alignment.
  std::uint64_t total_bytes = 0;
  /// Bytes of the matrices (GGUF bytes, aliases not counted) and of the F32
  /// vectors, before alignment padding.
  std::uint64_t matrix_bytes = 0;
  std::uint64_t vector_bytes = 0;

  /// The entry named `name`, or null.
  const WeightUpload* find(std::string_view name) const;
};

/// Plans the upload of `weights` with every tensor at a multiple of
/// `alignment` (a power of two, at least 16; std::invalid_argument
/// otherwise, or when the total overflows 64 bits).
WeightUploadPlan plan_weight_upload(const ModelWeights& weights,
                                    std::uint64_t alignment = kWeightArenaAlignment);

/// Bytes of one KV-cache block: a K and a V vector per layer, KV head and
/// token. Throws std::invalid_argument when a factor is zero or the product
/// overflows.
std::uint64_t kv_block_bytes(std::uint64_t n_layers, std::uint64_t n_kv_heads,
                             std::uint64_t head_dim, std::uint64_t block_size,
                             std::uint64_t bytes_per_element);

/// How many KV blocks of `bytes_per_block` fit a device budget of
/// `budget_bytes` after `weight_bytes` and `workspace_bytes`: floor((budget -
/// weights - workspace) / bytes_per_block), 0 when the budget does not even
/// cover the weights and workspace (the caller says how much is missing).
/// Throws std::invalid_argument when bytes_per_block is 0.
std::uint64_t kv_blocks_within_budget(std::uint64_t budget_bytes, std::uint64_t weight_bytes,
                                      std::uint64_t workspace_bytes, std::uint64_t bytes_per_block);

} // namespace caflm::cuda
