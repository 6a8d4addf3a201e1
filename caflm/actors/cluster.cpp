#include "caflm/actors/cluster.hpp"

#include <fmt/format.h>
#include <stdexcept>
#include <thread>

#include <caf/all.hpp>

#include "caflm/actors/connection_guard.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/engine_factory.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm {

std::pair<std::string, std::uint16_t> parse_host_port(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw std::invalid_argument("expected HOST:PORT, got '" + address + "'");
  std::string port_text = address.substr(colon + 1);
  unsigned long port = 0;
  std::size_t used = 0;
  try {
    port = std::stoul(port_text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != port_text.size() || port == 0 || port > 65535)
    throw std::invalid_argument("bad port in '" + address + "'");
  return {address.substr(0, colon), static_cast<std::uint16_t>(port)};
}

namespace {

struct CollectorState {
  GenerationResult result;
  CompletionHandler done;
  ChunkObserver observer;

  static inline const char* name = "caflm.collector";
};

token_sink::behavior_type collector(token_sink::stateful_pointer<CollectorState> self,
                                    std::uint64_t id, CompletionHandler done,
                                    ChunkObserver observer) {
  self->state.result.id = id;
  self->state.done = std::move(done);
  self->state.observer = std::move(observer);
  return {
      [self](const TokenBatch& batch) {
        GenerationResult& r = self->state.result;
        for (const TokenChunk& chunk : batch.chunks) {
          if (self->state.observer)
            self->state.observer(chunk);
          if (!chunk.prompt_tokens.empty())
            r.prompt_tokens = chunk.prompt_tokens;
          r.tokens.insert(r.tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
          r.text += chunk.text;
          r.logprobs.insert(r.logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
          r.top_logprobs.insert(r.top_logprobs.end(), chunk.top_logprobs.begin(),
                                chunk.top_logprobs.end());
          if (chunk.finish != FinishReason::None) {
            r.finish = chunk.finish;
            r.usage = chunk.usage;
            r.ok = true;
            self->state.done(std::move(r));
            self->quit();
            return;
          }
        }
      },
      [self](const InferenceError& error) {
        self->state.result.error = error;
        self->state.result.ok = false;
        self->state.done(std::move(self->state.result));
        self->quit();
      },
  };
}

} // namespace

token_sink spawn_collector(caf::actor_system& system, std::uint64_t id, CompletionHandler done,
                           ChunkObserver observer) {
  return system.spawn(collector, id, std::move(done), std::move(observer));
}

Cluster::Cluster(caf::actor_system& system, ClusterOptions options)
  : system_(system)
  , options_(std::move(options)) {
  std::shared_ptr<const Model> model;
  if (options_.replicas > 0) {
    if (options_.model_path.empty())
      throw std::invalid_argument("local replicas need a model path");
    model = Model::load(options_.model_path);
  }
  start(std::move(model));
}

Cluster::Cluster(caf::actor_system& system, std::shared_ptr<const Model> model,
                 ClusterOptions options)
  : system_(system)
  , options_(std::move(options)) {
  start(std::move(model));
}

void Cluster::start(std::shared_ptr<const Model> model) {
  // Everything that can fail happens before the first actor is spawned: an
  // actor left running would keep the caller's actor system from ever
  // shutting down.
  std::vector<std::pair<std::string, std::uint16_t>> remotes;
  for (const std::string& address : options_.workers)
    remotes.push_back(parse_host_port(address));
  if (options_.tls.enabled()) {
    const caf::actor_system_config& config = system_.config();
    if (!system_.has_openssl_manager() || config.openssl_certificate != options_.tls.certificate ||
        config.openssl_key != options_.tls.key || config.openssl_cafile != options_.tls.ca)
      throw std::invalid_argument("the cluster's TLS files are not those of its actor system: "
                                  "call caflm::enable_tls on the config before creating it");
  }
  const bool tls = uses_tls(system_);
  for (const auto& [host, port] : remotes) {
    if (!tls && !is_loopback_host(host))
      log(LogLevel::Warning,
          "the worker at {}:{} is reached over plain TCP: anyone on the way can read and "
          "alter its traffic (give the cluster's --tls-cert, --tls-key and --tls-ca)",
          host, port);
  }
  if (auto problem = validate(options_.limits))
    throw std::invalid_argument(*problem);
  if (auto problem = validate(options_.requests))
    throw std::invalid_argument(*problem);
  std::vector<std::shared_ptr<InferenceEngine>> local;
  if (options_.replicas > 0) {
    if (!model)
      throw std::invalid_argument("local replicas need a model");
    tokenizer_ = load_tokenizer(*model);
    EngineOptions engine_options;
    engine_options.device = resolve_device(options_.device);
    engine_options.kv_cache_bytes = options_.kv_cache_bytes;
    engine_options.kv_cache_type = options_.kv_cache_type;
    engine_options.gpu_memory = options_.gpu_memory;
    engine_options.max_context = options_.max_context;
    engine_options.requests = options_.requests;
    engine_options = engine_options_for(options_.limits, engine_options);
    if (engine_options.device == Device::Cpu) {
      const EngineConfig config = cpu_engine_config(*model, engine_options);
      check_available_memory(
          double(cpu_engine_bytes(*model, config)) * options_.replicas,
          fmt::format("the KV caches and buffers of {} replica(s)", options_.replicas));
    }
    // CUDA replicas take the devices in turn and share each one's budget.
    const std::size_t gpus = std::max<std::size_t>(cuda_device_count(), 1);
    const std::size_t per_gpu = (options_.replicas + gpus - 1) / gpus;
    engine_options.gpu_memory.fraction /= double(per_gpu);
    engine_options.gpu_memory.bytes /= per_gpu;
    for (std::uint32_t i = 0; i < options_.replicas; ++i) {
      engine_options.gpu_index = static_cast<int>(i % gpus);
      local.push_back(make_engine(model, tokenizer_, engine_options));
    }
  }
  // The coordinator routes by the engines' own prefix cache keys, which
  // the model salts.
  CoordinatorConfig coordinator_config = options_.coordinator;
  if (model)
    coordinator_config.cache_salt = model->cache_salt();
  coordinator_ = spawn_coordinator(system_, coordinator_config);
  for (auto& engine : local) {
    engine_names_.push_back("local-" + std::to_string(engines_.size()));
    engines_.push_back(spawn_engine_core(system_, std::move(engine), options_.limits));
    caf::anon_send(coordinator_, register_atom::value, engines_.back());
  }
  // A worker, or whoever answers at its address, may not make this node
  // hold more than the guard's limits.
  if (!remotes.empty())
    start_connection_guard(system_);
  for (auto& [host, port] : remotes) {
    remotes_.push_back(spawn_remote_engine(system_, host, port, coordinator_, options_.remote));
    engines_.push_back(remotes_.back());
    engine_names_.push_back(host + ":" + std::to_string(port));
  }
}

Cluster::~Cluster() {
  shutdown();
}

std::string Cluster::engine_name_of(std::uint64_t actor_id) const {
  for (std::size_t i = 0; i < engines_.size(); ++i)
    if (engines_[i] && engines_[i].id() == actor_id)
      return engine_names_[i];
  return {};
}

request_actor Cluster::submit(GenerateRequest request, token_sink sink) {
  return spawn_request(system_, coordinator_, std::move(request), std::move(sink),
                       options_.request);
}

std::future<GenerationResult> Cluster::generate_async(GenerateRequest request,
                                                      ChunkObserver observer) {
  auto promise = std::make_shared<std::promise<GenerationResult>>();
  auto future = promise->get_future();
  generate_async(
      std::move(request),
      [promise](GenerationResult&& result) { promise->set_value(std::move(result)); },
      std::move(observer));
  return future;
}

void Cluster::generate_async(GenerateRequest request, CompletionHandler done,
                             ChunkObserver observer) {
  auto sink = spawn_collector(system_, request.id, std::move(done), std::move(observer));
  submit(std::move(request), std::move(sink));
}

std::vector<std::string> Cluster::await_workers(std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system_};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> unreachable;
  for (;;) {
    unreachable.clear();
    for (std::size_t i = 0; i < remotes_.size(); ++i) {
      self->request(remotes_[i], timeout, status_atom::value)
          .receive(
              [&](const RemoteEngineStatus& status) {
                if (!status.connected)
                  unreachable.push_back(options_.workers[i] + ": " + status.problem);
              },
              [&](const caf::error& error) {
                unreachable.push_back(options_.workers[i] + ": " + system_.render(error));
              });
    }
    if (unreachable.empty() || std::chrono::steady_clock::now() >= deadline)
      return unreachable;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Cluster::shutdown() {
  // The coordinator first: its exit message then comes before any engine's
  // down message in its mailbox, and it does not warn of engines lost.
  if (coordinator_)
    caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown);
  coordinator_ = dp_coordinator_actor{};
  for (auto& engine : engines_)
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  engines_.clear();
  engine_names_.clear();
  remotes_.clear();
}

} // namespace caflm
