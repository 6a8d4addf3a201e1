#include "caflm/actors/cluster.hpp"

#include <stdexcept>

#include <caf/all.hpp>

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
  std::shared_ptr<std::promise<GenerationResult>> promise;
  ChunkObserver observer;

  static inline const char* name = "caflm.collector";
};

token_sink::behavior_type collector(token_sink::stateful_pointer<CollectorState> self,
                                    std::uint64_t id,
                                    std::shared_ptr<std::promise<GenerationResult>> promise,
                                    ChunkObserver observer) {
  self->state.result.id = id;
  self->state.promise = std::move(promise);
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
            self->state.promise->set_value(std::move(r));
            self->quit();
            return;
          }
        }
      },
      [self](const InferenceError& error) {
        self->state.result.error = error;
        self->state.result.ok = false;
        self->state.promise->set_value(std::move(self->state.result));
        self->quit();
      },
  };
}

} // namespace

token_sink spawn_collector(caf::actor_system& system, std::uint64_t id,
                           std::shared_ptr<std::promise<GenerationResult>> promise,
                           ChunkObserver observer) {
  return system.spawn(collector, id, std::move(promise), std::move(observer));
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
  std::vector<std::pair<std::string, std::uint16_t>> remotes;
  for (const std::string& address : options_.workers)
    remotes.push_back(parse_host_port(address));
  std::shared_ptr<const Tokenizer> tokenizer;
  if (options_.replicas > 0)
    tokenizer = load_tokenizer(*model);
  coordinator_ = spawn_coordinator(system_, options_.coordinator);
  for (std::uint32_t i = 0; i < options_.replicas; ++i) {
    auto engine =
        spawn_cpu_engine(system_, model, tokenizer, options_.limits, options_.kv_cache_bytes);
    caf::anon_send(coordinator_, register_atom::value, engine);
    engines_.push_back(engine);
  }
  for (auto& [host, port] : remotes)
    engines_.push_back(spawn_remote_engine(system_, host, port, coordinator_, options_.remote));
}

Cluster::~Cluster() {
  shutdown();
}

request_actor Cluster::submit(GenerateRequest request, token_sink sink) {
  return spawn_request(system_, coordinator_, std::move(request), std::move(sink),
                       options_.request);
}

std::future<GenerationResult> Cluster::generate_async(GenerateRequest request,
                                                      ChunkObserver observer) {
  auto promise = std::make_shared<std::promise<GenerationResult>>();
  auto future = promise->get_future();
  auto sink = spawn_collector(system_, request.id, std::move(promise), std::move(observer));
  submit(std::move(request), std::move(sink));
  return future;
}

void Cluster::shutdown() {
  for (auto& engine : engines_)
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  engines_.clear();
  if (coordinator_)
    caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown);
  coordinator_ = dp_coordinator_actor{};
}

} // namespace caflm
