#include "caflm/scheduler/request_table.hpp"

#include <algorithm>

namespace caflm {

const char* to_string(SchedulerError error) {
  switch (error) {
  case SchedulerError::DuplicateRequest:
    return "duplicate request id";
  case SchedulerError::Full:
    return "request table full";
  case SchedulerError::UnknownRequest:
    return "unknown request id";
  case SchedulerError::EmptyPrompt:
    return "empty prompt";
  case SchedulerError::ContextOverflow:
    return "sequence longer than the context";
  case SchedulerError::NotAwaitingToken:
    return "no sampled token is due for this request";
  case SchedulerError::Kv:
    return "KV block bookkeeping failed";
  case SchedulerError::BackendFailed:
    return "backend failed to run the step";
  case SchedulerError::OutputMismatch:
    return "backend outputs do not match the batch";
  case SchedulerError::LaunchCount:
    return "backend did not run the step as one launch";
  }
  return "unknown scheduler error";
}

RequestTable::RequestTable(const SchedulerConfig& config, BlockPool& pool, PrefixCache* cache)
  : config_(config)
  , pool_(pool)
  , cache_(cache)
  , tokens_(static_cast<std::size_t>(config.max_requests) * config.max_context)
  , prefix_scratch_(config.max_pages())
  , page_writes_(static_cast<std::size_t>(config.max_requests) * config.max_pages()) {
  slots_.reserve(config.max_requests);
  for (std::uint32_t i = 0; i < config.max_requests; ++i)
    slots_.emplace_back(config.max_pages());
}

TokenId* RequestTable::slot_tokens(std::uint32_t slot) {
  return tokens_.data() + static_cast<std::size_t>(slot) * config_.max_context;
}

const TokenId* RequestTable::tokens(std::uint32_t slot) const {
  return tokens_.data() + static_cast<std::size_t>(slot) * config_.max_context;
}

std::uint32_t RequestTable::find(std::uint64_t request_id) const {
  for (std::uint32_t i = 0; i < capacity(); ++i)
    if (slots_[i].state != RequestState::Empty && slots_[i].request_id == request_id)
      return i;
  return no_slot;
}

RequestView RequestTable::view(std::uint32_t slot) const {
  const Slot& s = slots_[slot];
  return RequestView{s.request_id,
                     slot,
                     s.state,
                     s.running,
                     s.awaiting_token,
                     s.prompt_length,
                     s.token_count,
                     s.computed,
                     s.cached_prompt_tokens,
                     s.arrival};
}

Expected<std::uint32_t, SchedulerError>
RequestTable::admit(std::uint64_t request_id, const TokenId* prompt, std::uint32_t prompt_length) {
  if (prompt_length == 0)
    return SchedulerError::EmptyPrompt;
  if (prompt_length > config_.max_context)
    return SchedulerError::ContextOverflow;
  if (find(request_id) != no_slot)
    return SchedulerError::DuplicateRequest;
  std::uint32_t slot = free_slot();
  if (slot == no_slot)
    return SchedulerError::Full;
  Slot& s = slots_[slot];
  s.request_id = request_id;
  s.arrival = next_arrival_++;
  s.state = RequestState::Prefill;
  s.running = false;
  s.awaiting_token = false;
  s.prompt_published = false;
  s.prompt_length = prompt_length;
  s.token_count = prompt_length;
  s.computed = 0;
  s.cached_prompt_tokens = 0;
  s.started = false;
  std::copy(prompt, prompt + prompt_length, slot_tokens(slot));
  ++active_;
  return slot;
}

std::uint32_t RequestTable::free_slot() const {
  for (std::uint32_t i = 0; i < capacity(); ++i)
    if (slots_[i].state == RequestState::Empty)
      return i;
  return no_slot;
}

Expected<std::uint32_t, SchedulerError> RequestTable::fork(std::uint64_t parent_id,
                                                           std::uint64_t child_id) {
  std::uint32_t parent = find(parent_id);
  if (parent == no_slot || !slots_[parent].running)
    return SchedulerError::UnknownRequest;
  if (find(child_id) != no_slot)
    return SchedulerError::DuplicateRequest;
  std::uint32_t slot = free_slot();
  if (slot == no_slot)
    return SchedulerError::Full;
  if (running_ >= config_.max_running)
    return SchedulerError::Full;
  Slot& child = slots_[slot];
  const Slot& source = slots_[parent];
  if (!child.blocks.fork_from(source.blocks, pool_))
    return SchedulerError::Kv;
  child.request_id = child_id;
  child.arrival = next_arrival_++;
  child.state = source.state;
  child.running = true;
  child.awaiting_token = source.awaiting_token;
  child.prompt_published = source.prompt_published;
  child.prompt_length = source.prompt_length;
  child.token_count = source.token_count;
  child.computed = source.computed;
  child.cached_prompt_tokens = source.cached_prompt_tokens;
  child.started = true;
  std::copy_n(tokens(parent), source.token_count, slot_tokens(slot));
  ++active_;
  ++running_;
  return slot;
}

void RequestTable::attach_cached_prefix(std::uint32_t slot) {
  Slot& s = slots_[slot];
  if (cache_ == nullptr || !s.blocks.empty())
    return;
  // Keep at least one token to compute: its logits give the next token.
  std::uint32_t max_blocks = (s.token_count - 1) / config_.block_size;
  std::uint32_t found =
      cache_->lookup(tokens(slot), s.token_count, prefix_scratch_.data(), max_blocks);
  if (found > 0 && s.blocks.install_prefix(prefix_scratch_.data(), found, pool_))
    s.computed = found * config_.block_size;
}

void RequestTable::start(std::uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.running)
    return;
  s.running = true;
  ++running_;
  attach_cached_prefix(slot);
  if (!s.started) {
    s.cached_prompt_tokens = std::min(s.computed, s.prompt_length);
    s.started = true;
  }
}

std::uint32_t RequestTable::pending_tokens(std::uint32_t slot) const {
  const Slot& s = slots_[slot];
  if (s.state == RequestState::Empty || s.awaiting_token)
    return 0;
  return s.token_count - s.computed;
}

std::uint32_t RequestTable::block_demand(std::uint32_t slot, std::uint32_t count) const {
  const Slot& s = slots_[slot];
  if (count == 0)
    return 0;
  std::uint32_t first = s.computed / config_.block_size;
  std::uint32_t last = (s.computed + count - 1) / config_.block_size;
  std::uint32_t demand = 0;
  for (std::uint32_t page = first; page <= last; ++page)
    if (page >= s.blocks.page_count() || pool_.refcount(s.blocks[page]) > 1)
      ++demand;
  return demand;
}

Expected<void, SchedulerError> RequestTable::append_token(std::uint32_t slot, TokenId token) {
  Slot& s = slots_[slot];
  if (s.state == RequestState::Empty || !s.awaiting_token)
    return SchedulerError::NotAwaitingToken;
  if (s.token_count >= config_.max_context)
    return SchedulerError::ContextOverflow;
  slot_tokens(slot)[s.token_count++] = token;
  s.awaiting_token = false;
  return {};
}

Expected<void, SchedulerError> RequestTable::finish(std::uint64_t request_id) {
  return release(request_id);
}

Expected<void, SchedulerError> RequestTable::cancel(std::uint64_t request_id) {
  return release(request_id);
}

Expected<void, SchedulerError> RequestTable::release(std::uint64_t request_id) {
  std::uint32_t slot = find(request_id);
  if (slot == no_slot)
    return SchedulerError::UnknownRequest;
  Slot& s = slots_[slot];
  if (!s.blocks.release_all(pool_))
    return SchedulerError::Kv;
  if (s.running)
    --running_;
  --active_;
  s.state = RequestState::Empty;
  s.running = false;
  s.awaiting_token = false;
  s.token_count = s.computed = s.prompt_length = 0;
  return {};
}

Expected<void, SchedulerError> RequestTable::preempt(std::uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.state == RequestState::Empty || !s.running)
    return SchedulerError::UnknownRequest;
  if (!s.blocks.release_all(pool_))
    return SchedulerError::Kv;
  s.running = false;
  --running_;
  s.state = RequestState::Prefill;
  s.awaiting_token = false;
  s.computed = 0;
  return {};
}

void RequestTable::publish(std::uint32_t slot) {
  const Slot& s = slots_[slot];
  if (cache_ != nullptr)
    cache_->publish(tokens(slot), s.computed, s.blocks.blocks(), s.blocks.page_count(), pool_);
}

Expected<void, SchedulerError> RequestTable::lower(const PlannedItem* plan, std::uint32_t count,
                                                   RaggedBatchBuffers& buffers) {
  buffers.clear();
  std::uint32_t writes = 0;
  // All or nothing: a failure undoes every page this call made writable, so
  // no table is left pointing at a copy the backend never filled.
  auto fail = [&](SchedulerError error) {
    while (writes > 0) {
      const PageWrite& write = page_writes_[--writes];
      slots_[write.slot].blocks.revert_writable(write.page, write.change, pool_);
    }
    buffers.clear();
    return error;
  };
  if (count > buffers.items.size())
    return fail(SchedulerError::Full);
  const std::uint32_t block_size = config_.block_size;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t slot = plan[i].slot;
    const std::uint32_t query_length = plan[i].tokens;
    Slot& s = slots_[slot];
    if (query_length == 0 || query_length > pending_tokens(slot))
      return fail(SchedulerError::UnknownRequest);
    const std::uint32_t first_page = s.computed / block_size;
    const std::uint32_t page_count = (s.computed + query_length + block_size - 1) / block_size;
    if (buffers.token_count + query_length > buffers.tokens.size() ||
        buffers.block_table_size + page_count > buffers.block_tables.size())
      return fail(SchedulerError::Full);
    // Copy-on-write before every write: no step writes a shared block.
    for (std::uint32_t page = first_page; page < page_count; ++page) {
      auto writable = s.blocks.ensure_writable(page, pool_);
      if (!writable)
        return fail(SchedulerError::Kv);
      page_writes_[writes++] = PageWrite{slot, page, *writable};
      if (writable->kind == CopyOnWrite::Kind::Copy)
        buffers.copies[buffers.copy_count++] = BlockCopy{writable->source, writable->block};
    }
    buffers.items[buffers.item_count++] = RaggedBatchItem{
        s.request_id, slot,        buffers.token_count, s.computed, buffers.block_table_size,
        page_count,   query_length};
    std::copy_n(tokens(slot) + s.computed, query_length,
                buffers.tokens.data() + buffers.token_count);
    std::copy_n(s.blocks.blocks(), page_count,
                buffers.block_tables.data() + buffers.block_table_size);
    buffers.token_count += query_length;
    buffers.block_table_size += page_count;
  }
  return {};
}

Expected<void, SchedulerError> RequestTable::commit(const RaggedBatchBuffers& buffers,
                                                    const RaggedBatchReceipt& receipt) {
  if (receipt.backend_launches != 1 && buffers.item_count > 0)
    return SchedulerError::LaunchCount;
  if (receipt.batch_size != buffers.item_count)
    return SchedulerError::OutputMismatch;
  for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
    const RaggedBatchItem& item = buffers.items[i];
    const RaggedBatchOutput& output = buffers.outputs[i];
    if (output.request_id != item.request_id || output.slot != item.slot ||
        output.tokens_computed != item.query_length || item.slot >= capacity())
      return SchedulerError::OutputMismatch;
    const Slot& s = slots_[item.slot];
    if (s.state == RequestState::Empty || s.request_id != item.request_id ||
        s.computed != item.position)
      return SchedulerError::OutputMismatch;
  }
  for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
    const RaggedBatchItem& item = buffers.items[i];
    Slot& s = slots_[item.slot];
    s.computed += item.query_length;
    if (s.computed == s.token_count) {
      s.state = RequestState::Decode;
      s.awaiting_token = true;
    }
    if (!s.prompt_published && s.computed >= s.prompt_length) {
      publish(item.slot);
      s.prompt_published = true;
    }
  }
  return {};
}

void RequestTable::recover_from_failed_step(const RaggedBatchBuffers& buffers) {
  for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
    const RaggedBatchItem& item = buffers.items[i];
    const BlockId* pages = buffers.block_tables.data() + item.block_table_offset;
    bool copied = false;
    for (std::uint32_t c = 0; c < buffers.copy_count && !copied; ++c)
      copied = std::find(pages, pages + item.page_count, buffers.copies[c].destination) !=
               pages + item.page_count;
    if (copied)
      (void)preempt(item.slot);
  }
}

} // namespace caflm
