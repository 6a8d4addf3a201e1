#pragma once

#include <cstdint>
#include <vector>

#include "caflm/kv/block_table.hpp"
#include "caflm/kv/prefix_cache.hpp"
#include "caflm/scheduler/ragged_batch.hpp"
#include "caflm/scheduler/scheduler_config.hpp"

namespace caflm {

/// Where a request slot stands.
enum class RequestState : std::uint8_t {
  /// Free slot.
  Empty,
  /// Its known tokens are (re)entering the KV cache in chunks.
  Prefill,
  /// It has caught up; each step computes the one token sampled last.
  Decode,
};

/// Why a request-table operation failed; the table is unchanged.
enum class SchedulerError : std::uint8_t {
  DuplicateRequest,
  Full,
  UnknownRequest,
  EmptyPrompt,
  ContextOverflow,
  /// A token was appended while none was awaited.
  NotAwaitingToken,
  Kv,
  BackendFailed,
  /// Outputs do not match the batch's items (identity, count, tokens).
  OutputMismatch,
  /// The backend did not run the step as exactly one launch.
  LaunchCount,
};

const char* to_string(SchedulerError error);

/// A read-only snapshot of one request slot.
struct RequestView {
  std::uint64_t request_id;
  std::uint32_t slot;
  RequestState state;
  /// Holds KV and takes part in steps (not waiting for a first step).
  bool running;
  /// Its last step produced logits and a sampled token is due.
  bool awaiting_token;
  std::uint32_t prompt_length;
  /// Prompt and generated tokens.
  std::uint32_t token_count;
  /// Tokens whose KV is in the cache.
  std::uint32_t computed;
  /// Prompt tokens found in the prefix cache when the request first started.
  std::uint32_t cached_prompt_tokens;
  std::uint64_t arrival;
};

/// A request given to the planner's step: compute `tokens` of `slot`.
struct PlannedItem {
  std::uint32_t slot;
  std::uint32_t tokens;
};

/// Fixed-capacity table of requests and their KV block tables.
///
/// Requests are admitted with their prompt, step through prefill chunks and
/// decodes, and leave by `finish`/`cancel`, which release identically. The
/// table enforces copy-on-write on every page a step writes, counts each
/// token once (when it is appended), and checks a step's outputs as a whole
/// before changing anything. No method allocates after construction.
class RequestTable {
 public:
  static constexpr std::uint32_t no_slot = UINT32_MAX;

  /// `cache` may be null to run without prefix sharing.
  RequestTable(const SchedulerConfig& config, BlockPool& pool, PrefixCache* cache);

  const SchedulerConfig& config() const { return config_; }
  BlockPool& pool() { return pool_; }
  PrefixCache* prefix_cache() { return cache_; }

  std::uint32_t capacity() const { return static_cast<std::uint32_t>(slots_.size()); }
  std::uint32_t active_count() const { return active_; }
  std::uint32_t running_count() const { return running_; }

  /// Takes a free slot for `request_id` with the given prompt. The request
  /// waits, holding no KV block, until a step starts it.
  Expected<std::uint32_t, SchedulerError> admit(std::uint64_t request_id, const TokenId* prompt,
                                                std::uint32_t prompt_length);

  /// Admits `child_id` as a copy of a running request that shares all of
  /// its KV pages; either one's next write into a shared page copies it
  /// first. For parallel sampling of one prompt.
  Expected<std::uint32_t, SchedulerError> fork(std::uint64_t parent_id, std::uint64_t child_id);

  /// Slot of an active request, or `no_slot`.
  std::uint32_t find(std::uint64_t request_id) const;

  RequestView view(std::uint32_t slot) const;
  /// Prompt then generated tokens of `slot`. // [token_count]
  const TokenId* tokens(std::uint32_t slot) const;
  const BlockTable& block_table(std::uint32_t slot) const { return slots_[slot].blocks; }

  /// Appends the token sampled for `slot` (the only place a token counts).
  Expected<void, SchedulerError> append_token(std::uint32_t slot, TokenId token);

  /// Normal completion: caches the request's full blocks, releases its
  /// blocks and frees the slot, all or nothing.
  Expected<void, SchedulerError> finish(std::uint64_t request_id);
  /// Cancellation: the same release as `finish`.
  Expected<void, SchedulerError> cancel(std::uint64_t request_id);

  /// Releases a running request's blocks and sends it back to wait; it
  /// recomputes its tokens when it runs again.
  Expected<void, SchedulerError> preempt(std::uint32_t slot);

  /// Marks a waiting request as running and attaches the longest cached
  /// prefix of its tokens (again, after a preemption). Waiting requests hold
  /// no blocks, so they never pin cached blocks that running ones need.
  void start(std::uint32_t slot);

  /// Tokens `slot` could compute now: all known tokens not yet in the
  /// cache, or none while a sampled token is awaited.
  std::uint32_t pending_tokens(std::uint32_t slot) const;

  /// New blocks that computing `tokens` more of `slot` needs at most.
  std::uint32_t block_demand(std::uint32_t slot, std::uint32_t tokens) const;

  /// Writes the planned items, in slot order, into `buffers`: tokens,
  /// concatenated block tables, and the copies that copy-on-write requires.
  /// `plan` must be sorted by slot. All or nothing: on failure every table
  /// and the pool are as they were, and `buffers` is empty.
  Expected<void, SchedulerError> lower(const PlannedItem* plan, std::uint32_t count,
                                       RaggedBatchBuffers& buffers);

  /// Applies a step's outputs after checking every one against its item.
  /// On any mismatch nothing changes. Requests whose item ends at their
  /// last known token then await a sampled token (logits row = item index).
  Expected<void, SchedulerError> commit(const RaggedBatchBuffers& buffers,
                                        const RaggedBatchReceipt& receipt);

  /// After a failed step: requests whose pages were copied in that step may
  /// hold blocks the backend never filled, so they recompute.
  void recover_from_failed_step(const RaggedBatchBuffers& buffers);

 private:
  struct Slot {
    explicit Slot(std::uint32_t max_pages)
      : blocks(max_pages) {}

    std::uint64_t request_id = 0;
    std::uint64_t arrival = 0;
    RequestState state = RequestState::Empty;
    bool running = false;
    bool awaiting_token = false;
    bool prompt_published = false;
    /// Ran at least once; its cached prompt tokens are counted.
    bool started = false;
    std::uint32_t prompt_length = 0;
    std::uint32_t token_count = 0;
    std::uint32_t computed = 0;
    std::uint32_t cached_prompt_tokens = 0;
    BlockTable blocks;
  };

  /// A page that `lower` made writable, to undo if the step cannot be built.
  struct PageWrite {
    std::uint32_t slot;
    std::uint32_t page;
    CopyOnWrite change;
  };

  TokenId* slot_tokens(std::uint32_t slot);
  std::uint32_t free_slot() const;
  void attach_cached_prefix(std::uint32_t slot);
  void publish(std::uint32_t slot);
  Expected<void, SchedulerError> release(std::uint64_t request_id);

  SchedulerConfig config_;
  BlockPool& pool_;
  PrefixCache* cache_;
  std::vector<Slot> slots_;
  std::vector<TokenId> tokens_;         // [max_requests, max_context]
  std::vector<BlockId> prefix_scratch_; // [max_pages]
  std::vector<PageWrite> page_writes_;  // [max_requests * max_pages]
  std::uint32_t active_ = 0;
  std::uint32_t running_ = 0;
  std::uint64_t next_arrival_ = 0;
};

} // namespace caflm
