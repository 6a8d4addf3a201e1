#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chrono>

#include <caf/fwd.hpp>

#include "caflm/actors/dp_coordinator_actor.hpp"
#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/actors/node_tls.hpp"
#include "caflm/actors/remote_engine_core_actor.hpp"
#include "caflm/actors/request_actor.hpp"
#include "caflm/engine/request_limits.hpp"
#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"

namespace caflm {

class Model;
class Tokenizer;

/// Where a cluster's engines come from.
struct ClusterOptions {
  /// Model for the local replicas (needed when `replicas` > 0).
  std::string model_path;
  /// Engines in this process, each with its own worker thread and KV cache.
  std::uint32_t replicas = 1;
  /// `caflm worker` processes to use, as "host:port".
  std::vector<std::string> workers;
  EngineLimits limits;
  /// KV cache per local replica, and the longest sequence one accepts (0:
  /// the model's context; either way at most what the KV cache holds).
  std::size_t kv_cache_bytes = std::size_t{1} << 30;
  std::uint32_t max_context = 0;
  /// Element type of a local CPU replica's KV cache, unset for the model's
  /// (EngineOptions).
  std::optional<KvCacheType> kv_cache_type;
  /// What one request may ask of a local replica (remote workers hold
  /// requests to their own limits).
  RequestLimits requests;
  /// Where local replicas run (CUDA replicas take the GPUs in turn), and
  /// the share of each GPU that all its replicas together take.
  Device device = Device::Cpu;
  GpuMemory gpu_memory;
  CoordinatorConfig coordinator;
  RemoteEngineOptions remote;
  RequestOptions request;
  /// The node certificate, key and cluster CA the actor system was
  /// configured with (enable_tls, before the system was created); workers
  /// are then reached through mutual TLS. Empty: plain TCP, unless the
  /// system was configured with TLS anyway.
  TlsOptions tls;
};

/// Called with every chunk as it arrives (on the collector's thread).
using ChunkObserver = std::function<void(const TokenChunk&)>;

struct GenerationResult;

/// Called once with a request's result when it ends (on the collector's
/// thread).
using CompletionHandler = std::function<void(GenerationResult&&)>;

/// What a finished request produced.
struct GenerationResult {
  std::uint64_t id = 0;
  /// False when the request failed; `error` says why.
  bool ok = false;
  InferenceError error;
  std::vector<TokenId> prompt_tokens;
  std::vector<TokenId> tokens;
  std::string text;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  FinishReason finish = FinishReason::None;
  Usage usage;
};

/// A running cluster inside the caller's actor system: a coordinator, local
/// replicas and proxies of remote workers. The system's config must have
/// had `add_message_types` applied.
///
///     caf::actor_system_config cfg;
///     caflm::add_message_types(cfg);
///     caf::actor_system sys{cfg};
///     caflm::Cluster cluster{sys, {"model.gguf", 2}};
///     auto result = cluster.generate(request);   // blocks
class Cluster {
 public:
  /// Loads the model (if local replicas are wanted) and spawns everything.
  /// Throws, with nothing left running, on a model that cannot be loaded, a
  /// malformed worker address, limits that cannot work, or replicas that do
  /// not fit in memory.
  Cluster(caf::actor_system& system, ClusterOptions options);
  /// Adds local replicas of an already loaded model.
  Cluster(caf::actor_system& system, std::shared_ptr<const Model> model, ClusterOptions options);
  ~Cluster();

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  dp_coordinator_actor coordinator() const { return coordinator_; }
  /// The local replicas' tokenizer (to tokenize prompts as they do), or null
  /// without local replicas.
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }
  const std::vector<engine_core_actor>& engines() const { return engines_; }
  /// A stable name for each of `engines()`: "local-N" for local replicas,
  /// "HOST:PORT" for remote workers.
  const std::vector<std::string>& engine_names() const { return engine_names_; }
  /// Whether `engines()[index]` is the proxy of a remote worker.
  bool is_remote_engine(std::size_t index) const {
    return index >= engines_.size() - remotes_.size();
  }
  /// The name of the engine whose actor id is `actor_id` (as request actors
  /// stamp their chunks, TokenChunk::engine_actor_id), or "" for none.
  std::string engine_name_of(std::uint64_t actor_id) const;

  /// Streams `request` to `sink`; send the returned actor `cancel_atom` to
  /// cancel it.
  request_actor submit(GenerateRequest request, token_sink sink);

  /// Runs `request` to its end and returns what it produced; `observer`
  /// sees each chunk as it streams.
  std::future<GenerationResult> generate_async(GenerateRequest request,
                                               ChunkObserver observer = {});
  /// As above, calling `done` with the result instead.
  void generate_async(GenerateRequest request, CompletionHandler done, ChunkObserver observer = {});
  GenerationResult generate(GenerateRequest request) {
    return generate_async(std::move(request)).get();
  }

  /// Waits until every remote worker is connected, at most `timeout`;
  /// returns one line per worker still unreachable ("host:port: why").
  std::vector<std::string> await_workers(std::chrono::milliseconds timeout);

  /// Stops every actor of the cluster.
  void shutdown();

 private:
  void start(std::shared_ptr<const Model> model);

  caf::actor_system& system_;
  ClusterOptions options_;
  dp_coordinator_actor coordinator_;
  std::vector<engine_core_actor> engines_;
  std::vector<std::string> engine_names_;
  std::vector<remote_engine_actor> remotes_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

/// Splits "host:port"; throws std::invalid_argument for anything else.
std::pair<std::string, std::uint16_t> parse_host_port(const std::string& address);

/// A sink that collects a request's stream and calls `done` at its end.
token_sink spawn_collector(caf::actor_system& system, std::uint64_t id, CompletionHandler done,
                           ChunkObserver observer = {});

} // namespace caflm
