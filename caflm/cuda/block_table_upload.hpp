#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm::cuda {

/// Shape of the paged KV cache on the device: K and V are each [n_layers,
/// n_blocks, n_kv_heads, block_size, head_dim] in F32, so one head's
/// positions in one block are contiguous. (The CPU's KvStorage stores keys
/// transposed within a block instead, for its vector kernels.)
struct PagedKvGeometry {
  std::uint32_t n_layers = 0;
  std::uint32_t n_blocks = 0;
  std::uint32_t block_size = 0;
  std::uint32_t n_kv_heads = 0;
  std::uint32_t head_dim = 0;

  /// Floats of one block of one layer (all KV heads), K or V.
  std::size_t block_floats() const { return std::size_t{n_kv_heads} * block_size * head_dim; }
  /// Floats of one layer, K or V.
  std::size_t layer_floats() const { return std::size_t{n_blocks} * block_floats(); }
  /// Floats of the whole cache, K or V.
  std::size_t cache_floats() const { return std::size_t{n_layers} * layer_floats(); }
  /// Floats of one token's K (or V) row: every KV head.
  std::size_t kv_dim() const { return std::size_t{n_kv_heads} * head_dim; }
};

/// Throws std::invalid_argument unless `geometry` is usable by the CUDA
/// kernels: every field nonzero, head_dim even and at most 256, and every
/// cache cell addressable by a 32-bit slot (n_blocks * block_size < 2^32).
void check_geometry(const PagedKvGeometry& geometry);

/// Where each section of a packed step lies, in 32-bit words from the start
/// of the packed array; the same offsets apply to its device copy.
struct RaggedStepSections {
  std::uint32_t token_count = 0;
  std::uint32_t block_table_size = 0;
  std::uint32_t copy_count = 0;
  /// Largest `position + 1` of any token: the longest context attended.
  std::uint32_t max_context = 0;
  std::size_t positions = 0;     // [token_count] sequence position of each token
  std::size_t table_offsets = 0; // [token_count] its item's first page in block_tables
  std::size_t slots = 0;         // [token_count] block * block_size + position % block_size
  std::size_t block_tables = 0;  // [block_table_size] the batch's pages, as given
  std::size_t copies = 0;        // [copy_count, 2] (source, destination) pairs
  std::size_t total = 0;         // words in all
};

/// The device-side view of a packed step: pointers into one uploaded array.
/// Plain pointers, so host code may build it without CUDA headers.
struct DeviceRaggedStep {
  const std::uint32_t* positions = nullptr;     // [token_count]
  const std::uint32_t* table_offsets = nullptr; // [token_count]
  const std::uint32_t* slots = nullptr;         // [token_count]
  const std::uint32_t* block_tables = nullptr;  // [block_table_size]
  const std::uint32_t* copies = nullptr;        // [copy_count, 2]
  std::uint32_t token_count = 0;
  std::uint32_t copy_count = 0;
  std::uint32_t max_context = 0;
};

/// Points a DeviceRaggedStep at `device_words`, the device copy of a packed
/// array laid out as `sections` says.
DeviceRaggedStep device_step(const RaggedStepSections& sections, const std::uint32_t* device_words);

/// Splits `copies` into consecutive waves that may each run as one parallel
/// launch with the same result as performing the copies one after another:
/// a copy starts a new wave when its source or destination is the
/// destination of an earlier copy in the current wave, or its destination is
/// the source of one. Writes the end index of each wave into `wave_ends`
/// (cleared first) and returns the number of waves.
std::size_t plan_copy_waves(const BlockCopy* copies, std::uint32_t copy_count,
                            std::vector<std::uint32_t>& wave_ends);

/// Packs a RaggedBatch's per-token metadata into one array of 32-bit words,
/// so one host-to-device copy per step uploads everything the KV store,
/// attention and copy kernels read. Capacities are fixed at construction;
/// packing never allocates.
class RaggedStepPacker {
 public:
  RaggedStepPacker(std::uint32_t max_tokens, std::uint32_t max_table_entries,
                   std::uint32_t max_copies);

  /// Words a device buffer needs to hold any packed step.
  std::size_t capacity_words() const { return words_.capacity(); }

  /// Validates `batch` against `geometry` and `max_context` as the CPU runner
  /// does (items contiguous in token order, nonempty, tables covering
  /// position + query_length, pages and copies inside the cache) and packs
  /// it. Throws std::invalid_argument naming the fault; then nothing packed
  /// is valid.
  ///
  /// With `padded_token_count` > token_count the step is laid out for that
  /// many tokens (a CUDA graph's bucket): each padding token has position 0,
  /// reads the batch's first page and writes its K and V to slot 0 of
  /// `padding_block`, a block outside `geometry` that nothing else reads.
  const RaggedStepSections& pack(const RaggedBatch& batch, const PagedKvGeometry& geometry,
                                 std::uint32_t max_context, std::uint32_t padded_token_count = 0,
                                 BlockId padding_block = 0);

  const RaggedStepSections& sections() const { return sections_; }
  /// The packed array, `sections().total` words.
  const std::uint32_t* words() const { return words_.data(); }
  /// End index of each copy wave of the last packed step; see plan_copy_waves.
  const std::vector<std::uint32_t>& copy_wave_ends() const { return wave_ends_; }

 private:
  std::uint32_t max_tokens_;
  std::uint32_t max_table_entries_;
  std::uint32_t max_copies_;
  RaggedStepSections sections_;
  std::vector<std::uint32_t> words_;
  std::vector<std::uint32_t> wave_ends_;
};

} // namespace caflm::cuda
