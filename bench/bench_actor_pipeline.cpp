// Tokens per second that caflm's actor pipeline delivers end to end, over a
// backend that does no model compute (NullBackend), so what is measured is
// the scheduler, sampler, detokenizer and the actors around them.
//
//   bench_actor_pipeline [--scenario NAME]... [--concurrency 256] [--requests 4096]
//                        [--max-tokens 64] [--repeat 3] [--scheduler-threads 0]
//                        [--logits-width 0] [--flush-us 1000]
//   bench_actor_pipeline --serve PORT   (the engine process of the remote scenarios)
//
// Scenarios:
//   engine   InferenceEngine::step() driven in a loop, no actors: the ceiling.
//   local    one engine core + detached worker in this process, behind the
//            coordinator and one request actor per request.
//   remote   the engine in a child process (this program with --serve),
//            reached through a RemoteEngineCoreActor proxy over loopback.
//   local2, remote2   the same with two engines.
//
// Every run is closed loop: `concurrency` requests are in flight at all
// times (a finished request's sink starts the next one) until `requests`
// have finished. Each request is greedy, ignore_eos, max_tokens tokens; its
// own sink actor counts the tokens it receives, and only those count.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "apps/allocator/allocator.hpp"
#include "bench/null_backend.hpp"
#include "caflm/actors/dp_coordinator_actor.hpp"
#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/actors/remote_engine_core_actor.hpp"
#include "caflm/actors/request_actor.hpp"
#include "caflm/actors/scheduler_threads.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

extern char** environ;

namespace caflm::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> scenarios{"engine", "local", "remote", "local2", "remote2"};
  std::uint32_t concurrency = 256;
  std::uint32_t requests = 4096;
  std::uint32_t max_tokens = 64;
  std::uint32_t repeat = 3;
  /// Width of the null backend's logits rows; 0: the tokenizer's
  /// vocabulary. Wider rows cost what a real model's vocabulary costs the
  /// sampler; the backend still picks only letters.
  std::uint32_t logits_width = 0;
  /// CAF scheduler threads; 0 keeps CAF's default.
  std::uint32_t scheduler_threads = 0;
  /// The engines' EngineLimits::token_flush_interval, in microseconds.
  std::uint32_t flush_us = static_cast<std::uint32_t>(kDefaultTokenFlushInterval.count());
  /// --serve: publish one null engine on this loopback port (0: any).
  int serve_port = -1;
};

// -- engines -----------------------------------------------------------------

/// An engine over a NullBackend, and a view of that backend's counters.
struct NullEngine {
  std::shared_ptr<InferenceEngine> engine;
  const NullBackend* backend = nullptr;
};

std::shared_ptr<const Tokenizer> make_tokenizer() {
  return std::make_shared<const Tokenizer>(
      std::make_shared<const Vocabulary>(Vocabulary::byte_level_bpe()));
}

/// Sized so that `options.concurrency` requests run together: that many
/// slots and running sequences, a token budget that fits a decode for each
/// plus prefill chunks, and KV blocks for all of them at full context.
NullEngine make_null_engine(std::shared_ptr<const Tokenizer> tokenizer, const Options& options) {
  const std::uint32_t concurrency = options.concurrency;
  EngineConfig config;
  SchedulerConfig& s = config.scheduler;
  s.max_requests = concurrency;
  s.max_running = concurrency;
  s.max_context = 256;
  s.block_size = 16;
  s.token_budget = std::max<std::uint32_t>(512, 2 * concurrency);
  config.kv_blocks = concurrency * s.max_pages() + 1;
  const auto vocab = static_cast<std::uint32_t>(tokenizer->vocabulary().size());
  auto backend = std::make_unique<NullBackend>(std::max(vocab, options.logits_width));
  const NullBackend* view = backend.get();
  auto engine =
      std::make_shared<InferenceEngine>(std::move(tokenizer), std::move(backend), config, 0);
  return {std::move(engine), view};
}

EngineLimits engine_limits(const Options& options) {
  EngineLimits limits;
  limits.max_concurrent = options.concurrency;
  limits.queue_capacity = options.concurrency;
  limits.token_flush_interval = std::chrono::microseconds(options.flush_us);
  return limits;
}

std::string prompt_text(std::uint64_t id) {
  return "Request " + std::to_string(id) + ": recite the alphabet, one letter at a time.";
}

SamplingParams request_params(std::uint32_t max_tokens) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  return params;
}

caf::actor_system_config& configure(caf::actor_system_config& config, const Options& options) {
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
  // As caflm's programs run it (apps/actor_runtime.cpp), unless told.
  if (options.scheduler_threads > 0)
    config.set("scheduler.max-threads", std::size_t{options.scheduler_threads});
  else
    use_scheduler_thread_per_core(config);
  return config;
}

// -- CPU time per thread -----------------------------------------------------

/// Time a thread spent on a CPU, and runnable but waiting for one (from
/// /proc/PID/task/TID/schedstat, in nanoseconds).
struct ThreadTime {
  std::string name;
  std::uint64_t on_cpu_ns = 0;
  std::uint64_t waiting_ns = 0;
};

using ThreadTimes = std::map<long, ThreadTime>;

ThreadTimes sample_threads(pid_t pid) {
  ThreadTimes times;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr)
    return times;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.')
      continue;
    const std::string task = dir + "/" + entry->d_name;
    ThreadTime t;
    std::ifstream(task + "/comm") >> t.name;
    std::ifstream(task + "/schedstat") >> t.on_cpu_ns >> t.waiting_ns;
    times[std::stol(entry->d_name)] = t;
  }
  closedir(tasks);
  return times;
}

/// CPU and run-queue seconds per group of threads over one run.
struct CpuSplit {
  struct Group {
    double on_cpu_s = 0;
    double waiting_s = 0;
    std::uint32_t threads = 0;
  };
  std::map<std::string, Group> groups;

  double on_cpu_s() const {
    double sum = 0;
    for (const auto& [name, group] : groups)
      sum += group.on_cpu_s;
    return sum;
  }
};

/// The threads of one process that a benchmark can name.
struct KnownThreads {
  /// The engines' detached workers (their backends saw them run).
  std::vector<long> workers;
  /// The middleman's multiplexer (CAF 0.17 also names its scheduler
  /// threads "caf.multiplexer", so the name alone does not tell).
  long multiplexer = 0;
};

/// Kernel id of the calling thread.
long current_thread_id() {
  return static_cast<long>(syscall(SYS_gettid));
}

/// Asks the middleman's multiplexer which thread it runs on.
long multiplexer_thread(caf::actor_system& system) {
  auto tid = std::make_shared<std::promise<long>>();
  auto answer = tid->get_future();
  system.middleman().backend().post([tid] { tid->set_value(current_thread_id()); });
  return answer.get();
}

/// Groups threads as: the engines' detached workers, the multiplexer,
/// CAF's scheduler threads, its clock, other detached actors and the
/// main thread.
CpuSplit split_cpu(const ThreadTimes& before, const ThreadTimes& after, pid_t pid,
                   const KnownThreads& known, const std::string& prefix) {
  CpuSplit split;
  for (const auto& [tid, end] : after) {
    ThreadTime start;
    if (auto it = before.find(tid); it != before.end())
      start = it->second;
    std::string group = "other";
    if (std::find(known.workers.begin(), known.workers.end(), tid) != known.workers.end())
      group = "engine worker";
    else if (tid == known.multiplexer)
      group = "middleman multiplexer";
    else if (end.name == "caf.multiplexer")
      group = "CAF scheduler";
    else if (end.name == "caf.clock")
      group = "CAF clock";
    else if (end.name == "caf.actor")
      group = "other detached actors";
    else if (tid == pid)
      group = "main";
    CpuSplit::Group& g = split.groups[prefix + group];
    g.on_cpu_s += double(end.on_cpu_ns - start.on_cpu_ns) * 1e-9;
    g.waiting_s += double(end.waiting_ns - start.waiting_ns) * 1e-9;
    ++g.threads;
  }
  return split;
}

double load_average() {
  double one_minute = 0;
  std::ifstream("/proc/loadavg") >> one_minute;
  return one_minute;
}

// -- the engine process of the remote scenarios ------------------------------

int serve(const Options& options) {
  // Stop signals are waited for below; every CAF thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  NullEngine null_engine = make_null_engine(make_tokenizer(), options);
  caf::actor_system_config config;
  caf::actor_system system{configure(config, options)};
  auto engine = spawn_engine_core(system, null_engine.engine, engine_limits(options));
  auto port = system.middleman().publish(engine, static_cast<std::uint16_t>(options.serve_port),
                                         "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "cannot listen: %s\n", system.render(port.error()).c_str());
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    return 1;
  }
  std::printf("listening on %u multiplexer %ld\n", unsigned{*port}, multiplexer_thread(system));
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  const NullBackend& backend = *null_engine.backend;
  std::printf("served steps %llu items %llu worker %ld\n",
              static_cast<unsigned long long>(backend.launches()),
              static_cast<unsigned long long>(backend.items()), backend.thread_id());
  std::fflush(stdout);
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return 0;
}

std::string executable_path() {
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0)
    throw std::runtime_error("cannot find this program's path");
  return std::string(path, static_cast<std::size_t>(length));
}

/// This program running `--serve 0` as a child process.
class ServerProcess {
 public:
  explicit ServerProcess(const Options& options) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    const std::string self = executable_path();
    const std::string concurrency = std::to_string(options.concurrency);
    const std::string threads = std::to_string(options.scheduler_threads);
    const std::string width = std::to_string(options.logits_width);
    const std::string flush_us = std::to_string(options.flush_us);
    std::vector<std::string> args{
        self,    "--serve",        "0",   "--concurrency", concurrency, "--scheduler-threads",
        threads, "--logits-width", width, "--flush-us",    flush_us};
    std::vector<char*> argv;
    for (std::string& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    const int failed = posix_spawn(&pid_, self.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (failed != 0) {
      close(fds[0]);
      throw std::runtime_error("cannot start " + self + ": " + std::strerror(failed));
    }
    output_ = fdopen(fds[0], "r");
    unsigned port = 0;
    if (std::fscanf(output_, " listening on %u multiplexer %ld", &port, &multiplexer_) != 2) {
      stop();
      throw std::runtime_error("the engine process did not start listening");
    }
    port_ = static_cast<std::uint16_t>(port);
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  ~ServerProcess() {
    if (pid_ > 0)
      stop();
  }

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  long multiplexer_thread() const { return multiplexer_; }

  /// Steps and items the engine ran, and the tid of its worker thread.
  struct Served {
    unsigned long long steps = 0;
    unsigned long long items = 0;
    long worker_tid = 0;
  };

  /// Stops the process and returns what it served. It reports before it
  /// shuts its actor system down; should that shutdown hang, the process is
  /// killed after a grace period and the hang reported.
  Served stop() {
    Served served;
    if (pid_ <= 0)
      return served;
    kill(pid_, SIGTERM);
    if (std::fscanf(output_, " served steps %llu items %llu worker %ld", &served.steps,
                    &served.items, &served.worker_tid) != 3)
      std::fprintf(stderr, "the engine process did not report what it served\n");
    std::fclose(output_);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "engine process %d still shutting down 5 s after SIGTERM; killed\n",
                     int{pid_});
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return served;
  }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  long multiplexer_ = 0;
  std::FILE* output_ = nullptr;
};

// -- load generation ---------------------------------------------------------

/// Shared by the sinks of one run: how many requests to start and what
/// they received.
struct LoadState {
  caf::actor_system* system = nullptr;
  dp_coordinator_actor coordinator;
  SamplingParams params;
  std::uint32_t total = 0;
  std::atomic<std::uint32_t> next_id{0};
  std::atomic<std::uint32_t> finished{0};
  std::atomic<std::uint32_t> incomplete{0};
  std::atomic<std::uint64_t> tokens{0};
  std::atomic<std::uint64_t> sink_messages{0};
  std::promise<Clock::time_point> all_finished;
};

void start_next_request(const std::shared_ptr<LoadState>& load);

struct SinkState {
  std::uint64_t tokens = 0;
  std::uint64_t messages = 0;

  static inline const char* name = "caflm.bench_sink";
};

/// Records one finished request and keeps the loop full.
void request_finished(const std::shared_ptr<LoadState>& load, const SinkState& sink,
                      bool complete) {
  load->tokens.fetch_add(sink.tokens, std::memory_order_relaxed);
  load->sink_messages.fetch_add(sink.messages, std::memory_order_relaxed);
  if (!complete)
    load->incomplete.fetch_add(1, std::memory_order_relaxed);
  start_next_request(load);
  if (load->finished.fetch_add(1, std::memory_order_acq_rel) + 1 == load->total)
    load->all_finished.set_value(Clock::now());
}

/// The user's end of one request: counts what arrives. A request is
/// complete when it ends by length with exactly max_tokens tokens.
token_sink::behavior_type counting_sink(token_sink::stateful_pointer<SinkState> self,
                                        std::shared_ptr<LoadState> load) {
  return {
      [self, load](const TokenBatch& batch) {
        ++self->state.messages;
        for (const TokenChunk& chunk : batch.chunks) {
          self->state.tokens += chunk.tokens.size();
          if (chunk.finish != FinishReason::None) {
            request_finished(load, self->state,
                             chunk.finish == FinishReason::Length &&
                                 self->state.tokens == load->params.max_tokens);
            self->quit();
            return;
          }
        }
      },
      [self, load](const InferenceError& error) {
        std::fprintf(stderr, "request %llu failed: %s\n",
                     static_cast<unsigned long long>(error.request_id), error.message.c_str());
        request_finished(load, self->state, false);
        self->quit();
      },
  };
}

void start_next_request(const std::shared_ptr<LoadState>& load) {
  const std::uint32_t id = load->next_id.fetch_add(1, std::memory_order_relaxed);
  if (id >= load->total)
    return;
  auto sink = load->system->spawn(counting_sink, load);
  GenerateRequest request;
  request.id = id;
  request.prompt = prompt_text(id);
  request.params = load->params;
  spawn_request(*load->system, load->coordinator, std::move(request), std::move(sink));
}

/// Waits until the coordinator knows `engines` engines (remote proxies
/// register once connected).
void await_engines(caf::actor_system& system, const dp_coordinator_actor& coordinator,
                   std::uint32_t engines) {
  caf::scoped_actor self{system};
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::uint32_t known = 0;
    self->request(coordinator, std::chrono::seconds(1), stats_atom::value)
        .receive([&](const CoordinatorStats& stats) { known = stats.engines; },
                 [](const caf::error&) {});
    if (known >= engines)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("the engines did not register with the coordinator");
}

// -- runs --------------------------------------------------------------------

struct RunResult {
  double seconds = 0;
  std::uint64_t tokens = 0;
  std::uint64_t sink_messages = 0;
  std::uint32_t requests = 0;
  std::uint32_t incomplete = 0;
  /// Backend launches (steps) and items over all engines.
  std::uint64_t steps = 0;
  std::uint64_t items = 0;
  CpuSplit cpu;
  double load_before = 0;
  double load_after = 0;

  double tokens_per_s() const { return double(tokens) / seconds; }
};

/// The ceiling: one engine stepped in a loop on this thread, no actors.
RunResult run_engine_only(const Options& options) {
  auto tokenizer = make_tokenizer();
  NullEngine null_engine = make_null_engine(tokenizer, options);
  InferenceEngine& engine = *null_engine.engine;
  const SamplingParams params = request_params(options.max_tokens);
  std::uint32_t next_id = 0;
  auto add_next = [&] {
    if (next_id >= options.requests)
      return;
    GenerationRequest request;
    request.id = next_id;
    request.prompt = tokenizer->encode(prompt_text(next_id), tokenizer->vocabulary().add_bos());
    request.params = params;
    if (engine.add(std::move(request)))
      throw std::runtime_error("the engine refused a request");
    ++next_id;
  };
  RunResult result;
  result.requests = options.requests;
  result.load_before = load_average();
  const pid_t pid = getpid();
  ThreadTimes before = sample_threads(pid);
  const auto start = Clock::now();
  for (std::uint32_t i = 0; i < options.concurrency; ++i)
    add_next();
  std::uint32_t finished = 0;
  while (finished < options.requests) {
    for (const TokenEvent& event : engine.step()) {
      if (event.finish == FinishReason::Error || event.finish == FinishReason::Cancelled) {
        ++result.incomplete;
      } else {
        ++result.tokens;
      }
      if (event.finish != FinishReason::None) {
        ++finished;
        add_next();
      }
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.cpu = split_cpu(before, sample_threads(pid), pid, KnownThreads{}, "");
  result.load_after = load_average();
  result.steps = null_engine.backend->launches();
  result.items = null_engine.backend->items();
  return result;
}

/// The actor pipeline with `engines` engines, here or in child processes.
RunResult run_pipeline(const Options& options, std::uint32_t engines, bool remote) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  if (remote)
    for (std::uint32_t i = 0; i < engines; ++i)
      servers.push_back(std::make_unique<ServerProcess>(options));

  RunResult result;
  result.requests = options.requests;
  std::vector<NullEngine> local_engines;
  const pid_t pid = getpid();
  ThreadTimes before;
  ThreadTimes after;
  KnownThreads known;
  std::vector<ThreadTimes> servers_before;
  std::vector<ThreadTimes> servers_after;
  {
    caf::actor_system_config config;
    caf::actor_system system{configure(config, options)};
    auto coordinator = spawn_coordinator(system);
    std::vector<engine_core_actor> engine_actors;
    if (remote) {
      for (const auto& server : servers)
        engine_actors.push_back(
            spawn_remote_engine(system, "127.0.0.1", server->port(), coordinator));
    } else {
      auto tokenizer = make_tokenizer();
      for (std::uint32_t i = 0; i < engines; ++i) {
        local_engines.push_back(make_null_engine(tokenizer, options));
        engine_actors.push_back(
            spawn_engine_core(system, local_engines.back().engine, engine_limits(options)));
        caf::anon_send(coordinator, register_atom::value, engine_actors.back());
      }
    }
    await_engines(system, coordinator, engines);
    known.multiplexer = multiplexer_thread(system);

    auto load = std::make_shared<LoadState>();
    load->system = &system;
    load->coordinator = coordinator;
    load->params = request_params(options.max_tokens);
    load->total = options.requests;
    auto finished = load->all_finished.get_future();

    result.load_before = load_average();
    before = sample_threads(pid);
    for (const auto& server : servers)
      servers_before.push_back(sample_threads(server->pid()));
    const auto start = Clock::now();
    for (std::uint32_t i = 0; i < options.concurrency; ++i)
      start_next_request(load);
    const auto end = finished.get();
    result.seconds = std::chrono::duration<double>(end - start).count();
    after = sample_threads(pid);
    for (const auto& server : servers)
      servers_after.push_back(sample_threads(server->pid()));
    result.load_after = load_average();
    result.tokens = load->tokens.load();
    result.sink_messages = load->sink_messages.load();
    result.incomplete = load->incomplete.load();

    for (auto& engine : engine_actors)
      caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  }

  for (const NullEngine& engine : local_engines) {
    known.workers.push_back(engine.backend->thread_id());
    result.steps += engine.backend->launches();
    result.items += engine.backend->items();
  }
  result.cpu = split_cpu(before, after, pid, known, "");
  for (std::size_t i = 0; i < servers.size(); ++i) {
    ServerProcess::Served served = servers[i]->stop();
    result.steps += served.steps;
    result.items += served.items;
    KnownThreads server_threads{{served.worker_tid}, servers[i]->multiplexer_thread()};
    CpuSplit server_cpu = split_cpu(servers_before[i], servers_after[i], servers[i]->pid(),
                                    server_threads, "server ");
    for (const auto& [name, group] : server_cpu.groups) {
      CpuSplit::Group& g = result.cpu.groups[name];
      g.on_cpu_s += group.on_cpu_s;
      g.waiting_s += group.waiting_s;
      g.threads += group.threads;
    }
  }
  return result;
}

// -- reporting ---------------------------------------------------------------

/// Serialized size of a TokenBatch of `chunks` mid-stream chunks, one token
/// and one byte of text each, as the worker builds them.
std::size_t token_batch_bytes(std::size_t chunks) {
  TokenBatch batch;
  for (std::size_t i = 0; i < chunks; ++i) {
    TokenChunk chunk;
    chunk.request_id = i;
    chunk.tokens = {TokenId{'a'}};
    chunk.text = "a";
    chunk.logprobs = {0.0f};
    batch.chunks.push_back(std::move(chunk));
  }
  std::vector<char> buffer;
  caf::binary_serializer sink{nullptr, buffer};
  if (auto error = sink(batch))
    throw std::runtime_error("cannot serialize a TokenBatch");
  return buffer.size();
}

void print_run(const std::string& scenario, std::uint32_t index, const RunResult& r) {
  std::printf("%-8s run %u: %llu tokens (%u requests, %u incomplete) in %.3f s = %.0f tokens/s; "
              "%llu steps (%.1f items/step, %.3f ms/step); load %.2f -> %.2f\n",
              scenario.c_str(), index + 1, static_cast<unsigned long long>(r.tokens), r.requests,
              r.incomplete, r.seconds, r.tokens_per_s(), static_cast<unsigned long long>(r.steps),
              r.steps ? double(r.items) / double(r.steps) : 0.0,
              r.steps ? 1e3 * r.seconds / double(r.steps) : 0.0, r.load_before, r.load_after);
  for (const auto& [name, g] : r.cpu.groups)
    std::printf("    %-30s %2u thread(s): on CPU %.3f s (%4.0f%% of wall, %5.2f us/token), "
                "runnable but waiting %.3f s\n",
                name.c_str(), g.threads, g.on_cpu_s, 100.0 * g.on_cpu_s / r.seconds,
                1e6 * g.on_cpu_s / double(r.tokens), g.waiting_s);
  std::fflush(stdout);
}

struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
};

Spread spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

void print_summary(const std::string& scenario, const std::vector<RunResult>& runs, bool remote) {
  std::vector<double> tokens_per_s;
  std::vector<double> sink_msgs_per_s;
  std::vector<double> steps_per_s;
  std::vector<double> cpu_us_per_token;
  std::vector<double> loads;
  for (const RunResult& r : runs) {
    tokens_per_s.push_back(r.tokens_per_s());
    sink_msgs_per_s.push_back(double(r.sink_messages) / r.seconds);
    steps_per_s.push_back(double(r.steps) / r.seconds);
    cpu_us_per_token.push_back(1e6 * r.cpu.on_cpu_s() / double(r.tokens));
    loads.push_back(r.load_before);
  }
  const Spread t = spread(tokens_per_s);
  const Spread m = spread(sink_msgs_per_s);
  const Spread s = spread(steps_per_s);
  const Spread c = spread(cpu_us_per_token);
  const Spread l = spread(loads);
  std::printf("%-8s tokens/s median %.0f [%.0f .. %.0f]; steps/s %.0f [%.0f .. %.0f]; "
              "CPU %.2f us/token [%.2f .. %.2f]; load avg %.2f [%.2f .. %.2f]\n",
              scenario.c_str(), t.median, t.min, t.max, s.median, s.min, s.max, c.median, c.min,
              c.max, l.median, l.min, l.max);
  if (remote) {
    // The payload crossing the middleman: the chunks of each step's batch.
    const double per_chunk = double(token_batch_bytes(2) - token_batch_bytes(1));
    std::printf("%-8s cross-process: %.0f TokenBatch msgs/s of %.0f chunks, %.0f bytes/chunk "
                "serialized: ~%.1f MB/s of token payload\n",
                scenario.c_str(), s.median, t.median / s.median, per_chunk,
                t.median * per_chunk * 1e-6);
  }
  if (scenario != "engine")
    // The token path: the worker (or remote proxy) sends each request
    // actor one batch per flush (every step, or fewer with --flush-us),
    // which forwards each chunk to its sink.
    std::printf("%-8s sink msgs/s %.0f [%.0f .. %.0f], %.2f tokens each; token-path actor "
                "msgs/s ~%.0f (2 per sink message + 1 step); %s\n",
                scenario.c_str(), m.median, m.min, m.max, t.median / m.median,
                2 * m.median + s.median,
                remote ? "request-side actors in this process" : "all in one process");
  std::fflush(stdout);
}

int run_benchmarks(const Options& options) {
  const std::size_t vocab = make_tokenizer()->vocabulary().size();
  std::printf("actor pipeline over a null backend: %u concurrent requests, %u per run, "
              "max_tokens %u (ignore_eos, greedy), logits rows of %zu, %u runs each; "
              "token flush interval %u us; %u hardware threads; CAF scheduler threads %s; "
              "allocator %s\n",
              options.concurrency, options.requests, options.max_tokens,
              std::max<std::size_t>(vocab, options.logits_width), options.repeat, options.flush_us,
              std::thread::hardware_concurrency(),
              std::to_string(options.scheduler_threads ? options.scheduler_threads
                                                       : scheduler_threads_per_core())
                  .c_str(),
              apps::allocator_in_use().c_str());
  struct Scenario {
    std::string name;
    std::vector<RunResult> runs;
    bool remote = false;
  };
  std::vector<Scenario> done;
  for (const std::string& name : options.scenarios) {
    Scenario scenario{name, {}, name.rfind("remote", 0) == 0};
    const std::uint32_t engines = name.back() == '2' ? 2 : 1;
    for (std::uint32_t i = 0; i < options.repeat; ++i) {
      scenario.runs.push_back(name == "engine" ? run_engine_only(options)
                                               : run_pipeline(options, engines, scenario.remote));
      print_run(name, i, scenario.runs.back());
    }
    done.push_back(std::move(scenario));
  }
  std::printf("\nsummary (median [min .. max] over %u runs)\n", options.repeat);
  for (const Scenario& scenario : done)
    print_summary(scenario.name, scenario.runs, scenario.remote);
  return 0;
}

} // namespace

} // namespace caflm::bench

int main(int argc, char** argv) {
  using caflm::bench::Options;
  Options options;
  CLI::App app{"Tokens per second of caflm's actor pipeline over a null backend"};
  app.add_option("--scenario", options.scenarios,
                 "engine, local, remote, local2, remote2 (repeatable)")
      ->check(CLI::IsMember({"engine", "local", "remote", "local2", "remote2"}))
      ->capture_default_str();
  app.add_option("--concurrency", options.concurrency, "Requests in flight")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--requests", options.requests, "Requests per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-tokens", options.max_tokens, "Tokens per request")
      ->check(CLI::Range(1u, 128u))
      ->capture_default_str();
  app.add_option("--repeat", options.repeat, "Runs per scenario")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--logits-width", options.logits_width,
                 "Logits row width of the null backend (0: the tokenizer's vocabulary)")
      ->capture_default_str();
  app.add_option("--scheduler-threads", options.scheduler_threads,
                 "CAF scheduler threads (0: one per core, as caflm's programs)")
      ->capture_default_str();
  app.add_option("--flush-us", options.flush_us,
                 "Engines' token flush interval in microseconds (0: one message per step)")
      ->capture_default_str();
  app.add_option("--serve", options.serve_port,
                 "Act as the engine process: publish a null engine on this loopback port");
  CLI11_PARSE(app, argc, argv);
  try {
    return options.serve_port >= 0 ? caflm::bench::serve(options)
                                   : caflm::bench::run_benchmarks(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_actor_pipeline: %s\n", e.what());
    return 1;
  }
}
