#include "caflm/cuda/block_table_upload.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace caflm::cuda {

namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("ragged step: " + what);
}

std::string item_name(std::uint32_t i) {
  return "item " + std::to_string(i);
}

} // namespace

void check_geometry(const PagedKvGeometry& geometry) {
  if (geometry.n_layers == 0 || geometry.n_blocks == 0 || geometry.block_size == 0 ||
      geometry.n_kv_heads == 0 || geometry.head_dim == 0)
    throw std::invalid_argument("paged KV geometry: every dimension must be nonzero");
  if (geometry.head_dim % 2 != 0 || geometry.head_dim > 256)
    throw std::invalid_argument("paged KV geometry: head_dim " + std::to_string(geometry.head_dim) +
                                " is not an even size up to 256");
  if (std::uint64_t{geometry.n_blocks} * geometry.block_size >
      std::numeric_limits<std::uint32_t>::max())
    throw std::invalid_argument("paged KV geometry: n_blocks * block_size exceeds 32-bit slots");
}

DeviceRaggedStep device_step(const RaggedStepSections& sections,
                             const std::uint32_t* device_words) {
  DeviceRaggedStep step;
  step.positions = device_words + sections.positions;
  step.table_offsets = device_words + sections.table_offsets;
  step.slots = device_words + sections.slots;
  step.block_tables = device_words + sections.block_tables;
  step.copies = device_words + sections.copies;
  step.token_count = sections.token_count;
  step.copy_count = sections.copy_count;
  step.max_context = sections.max_context;
  return step;
}

std::size_t plan_copy_waves(const BlockCopy* copies, std::uint32_t copy_count,
                            std::vector<std::uint32_t>& wave_ends) {
  wave_ends.clear();
  std::uint32_t wave_begin = 0;
  for (std::uint32_t c = 0; c < copy_count; ++c) {
    bool conflict = false;
    // Sequential semantics break in a parallel wave on read-after-write
    // (reads an earlier destination), write-after-write (same destination)
    // and write-after-read (overwrites an earlier source).
    for (std::uint32_t e = wave_begin; e < c && !conflict; ++e)
      conflict = copies[c].source == copies[e].destination ||
                 copies[c].destination == copies[e].destination ||
                 copies[c].destination == copies[e].source;
    if (conflict) {
      wave_ends.push_back(c);
      wave_begin = c;
    }
  }
  if (copy_count > 0)
    wave_ends.push_back(copy_count);
  return wave_ends.size();
}

RaggedStepPacker::RaggedStepPacker(std::uint32_t max_tokens, std::uint32_t max_table_entries,
                                   std::uint32_t max_copies)
  : max_tokens_(max_tokens)
  , max_table_entries_(max_table_entries)
  , max_copies_(max_copies) {
  words_.reserve(std::size_t{3} * max_tokens + max_table_entries + std::size_t{2} * max_copies);
  wave_ends_.reserve(max_copies);
}

const RaggedStepSections& RaggedStepPacker::pack(const RaggedBatch& batch,
                                                 const PagedKvGeometry& geometry,
                                                 std::uint32_t max_context,
                                                 std::uint32_t padded_token_count,
                                                 BlockId padding_block) {
  sections_ = RaggedStepSections{};
  words_.clear();
  wave_ends_.clear();
  check_geometry(geometry);
  if (batch.token_count > max_tokens_)
    invalid(std::to_string(batch.token_count) + " tokens exceed the capacity of " +
            std::to_string(max_tokens_));
  if (batch.block_table_size > max_table_entries_)
    invalid(std::to_string(batch.block_table_size) +
            " block table entries exceed the capacity of " + std::to_string(max_table_entries_));
  if (batch.copy_count > max_copies_)
    invalid(std::to_string(batch.copy_count) + " copies exceed the capacity of " +
            std::to_string(max_copies_));
  for (std::uint32_t p = 0; p < batch.block_table_size; ++p)
    if (batch.block_tables[p] >= geometry.n_blocks)
      invalid("block table entry " + std::to_string(p) + " names block " +
              std::to_string(batch.block_tables[p]) + " outside the cache");
  for (std::uint32_t c = 0; c < batch.copy_count; ++c)
    if (batch.copies[c].source >= geometry.n_blocks ||
        batch.copies[c].destination >= geometry.n_blocks)
      invalid("copy " + std::to_string(c) + " names a block outside the cache");

  if (padded_token_count > max_tokens_)
    invalid(std::to_string(padded_token_count) + " padded tokens exceed the capacity of " +
            std::to_string(max_tokens_));
  if (padded_token_count > batch.token_count && batch.block_table_size == 0)
    invalid("a padded step needs a page for its padding tokens to read");
  const std::uint32_t n = std::max(batch.token_count, padded_token_count);
  RaggedStepSections s;
  s.token_count = n;
  s.block_table_size = batch.block_table_size;
  s.copy_count = batch.copy_count;
  s.positions = 0;
  s.table_offsets = s.positions + n;
  s.slots = s.table_offsets + n;
  s.block_tables = s.slots + n;
  s.copies = s.block_tables + batch.block_table_size;
  s.total = s.copies + std::size_t{2} * batch.copy_count;
  words_.resize(s.total); // within the reserved capacity: no allocation

  std::uint32_t next_token = 0;
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const RaggedBatchItem& item = batch.items[i];
    const std::uint64_t end = std::uint64_t{item.position} + item.query_length;
    if (item.query_length == 0)
      invalid(item_name(i) + " has no tokens");
    if (item.token_offset != next_token)
      invalid(item_name(i) + " does not start where the previous item ends");
    if (std::uint64_t{next_token} + item.query_length > batch.token_count)
      invalid(item_name(i) + " runs past the batch's tokens");
    if (end > max_context)
      invalid(item_name(i) + " ends at position " + std::to_string(end) +
              " past the context limit " + std::to_string(max_context));
    if (std::uint64_t{item.page_count} * geometry.block_size < end)
      invalid(item_name(i) + "'s pages do not cover its positions");
    if (std::uint64_t{item.block_table_offset} + item.page_count > batch.block_table_size)
      invalid(item_name(i) + "'s pages run past the block tables");
    const BlockId* pages = batch.block_tables + item.block_table_offset;
    for (std::uint32_t t = 0; t < item.query_length; ++t) {
      const std::uint32_t row = item.token_offset + t;
      const std::uint32_t pos = item.position + t;
      words_[s.positions + row] = pos;
      words_[s.table_offsets + row] = item.block_table_offset;
      words_[s.slots + row] =
          pages[pos / geometry.block_size] * geometry.block_size + pos % geometry.block_size;
    }
    next_token += item.query_length;
    if (static_cast<std::uint32_t>(end) > s.max_context)
      s.max_context = static_cast<std::uint32_t>(end);
  }
  if (next_token != batch.token_count)
    invalid("items cover " + std::to_string(next_token) + " of " +
            std::to_string(batch.token_count) + " tokens");
  for (std::uint32_t row = batch.token_count; row < n; ++row) {
    words_[s.positions + row] = 0;
    words_[s.table_offsets + row] = 0;
    words_[s.slots + row] = padding_block * geometry.block_size;
  }
  for (std::uint32_t p = 0; p < batch.block_table_size; ++p)
    words_[s.block_tables + p] = batch.block_tables[p];
  for (std::uint32_t c = 0; c < batch.copy_count; ++c) {
    words_[s.copies + 2 * std::size_t{c}] = batch.copies[c].source;
    words_[s.copies + 2 * std::size_t{c} + 1] = batch.copies[c].destination;
  }
  plan_copy_waves(batch.copies, batch.copy_count, wave_ends_);
  sections_ = s;
  return sections_;
}

} // namespace caflm::cuda
