// Failover across processes, told top to bottom.
//
// Two `caflm worker` processes (A and B) serve one model on loopback; a
// Cluster in this process spreads six requests over them. Worker B is then
// killed with SIGKILL while it streams. Its requests resume on A from the
// prompt plus the tokens already generated, and, because every kernel is
// batch invariant and the sampler counts its draws, each request ends with
// exactly the text a fault-free run produced.
//
//   multi_process_demo [--model FILE] [--caflm PATH]
//
// --model: a GGUF model (default: a small random one, written to /tmp).
// --caflm: the caflm binary (default: ../apps/caflm next to this program).
// Exits 0 when every request finished with the fault-free text, 1 otherwise.
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <future>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"
#include "examples/demo_model.hpp"

using namespace caflm;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kRequests = 6;
constexpr std::uint32_t kMaxTokens = 64;

/// A `caflm worker` child process; killed and reaped when it goes out of
/// scope.
class Worker {
 public:
  Worker(const std::string& name, const std::string& caflm, const std::string& model) {
    std::vector<std::string> args{caflm,       "worker", "--model", model,           "--host",
                                  "127.0.0.1", "--port", "0",       "--kv-cache-mb", "64"};
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // The worker prints "caflm worker listening on 127.0.0.1:PORT".
    std::string line;
    char c = 0;
    pollfd readable{out[0], POLLIN, 0};
    while (::poll(&readable, 1, 20000) == 1 && ::read(out[0], &c, 1) == 1 && c != '\n')
      line.push_back(c);
    ::close(out[0]);
    auto colon = line.rfind(':');
    if (c != '\n' || colon == std::string::npos) {
      kill();
      throw std::runtime_error("worker " + name + " did not start (" + caflm + ")");
    }
    address_ = line.substr(line.rfind(' ') + 1);
  }
  ~Worker() { kill(); }

  const std::string& address() const { return address_; }

  /// SIGKILL: no goodbye, no flushing; the socket just closes.
  void kill() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string address_;
  pid_t pid_ = -1;
};

/// Deletes the file at `path`, if any, when it goes out of scope.
struct RemovedOnExit {
  std::string path;
  ~RemovedOnExit() {
    if (!path.empty())
      std::filesystem::remove(path);
  }
};

std::vector<GenerateRequest> make_requests() {
  const char* topics[kRequests] = {"actors",   "paged caches", "batching",
                                   "sampling", "failover",     "prefixes"};
  std::vector<GenerateRequest> requests;
  for (std::size_t i = 0; i < kRequests; ++i) {
    GenerateRequest r;
    r.id = i + 1;
    r.prompt = std::string("Tell me a long story about ") + topics[i] + ".";
    r.params.max_tokens = kMaxTokens;
    r.params.ignore_eos = true;
    // Odd requests sample (seeded), even ones are greedy.
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.top_p = 0.95f;
    r.params.seed = 42 + i;
    requests.push_back(std::move(r));
  }
  return requests;
}

/// Tokens streamed so far, and whether the last one came, per request.
struct Progress {
  std::array<std::atomic<std::size_t>, kRequests> tokens{};
  std::array<std::atomic<bool>, kRequests> finished{};
};

std::vector<GenerationResult> run(Cluster& cluster, Progress& progress) {
  std::vector<std::future<GenerationResult>> futures;
  std::vector<GenerateRequest> requests = make_requests();
  for (std::size_t i = 0; i < kRequests; ++i)
    futures.push_back(
        cluster.generate_async(std::move(requests[i]), [&progress, i](const TokenChunk& chunk) {
          progress.tokens[i] += chunk.tokens.size();
          if (chunk.finish != FinishReason::None)
            progress.finished[i] = true;
        }));
  std::vector<GenerationResult> results;
  for (auto& future : futures) {
    if (future.wait_for(30s) != std::future_status::ready)
      throw std::runtime_error("a request did not finish within 30 s");
    results.push_back(future.get());
  }
  return results;
}

/// The text on one line: control characters (a random model emits tabs and
/// newlines as readily as letters) become spaces.
std::string one_line(std::string text) {
  for (char& c : text)
    if ((c >= 0 && c < 0x20) || c == 0x7f)
      c = ' ';
  return text;
}

CoordinatorStats stats(caf::actor_system& system, const Cluster& cluster) {
  caf::scoped_actor self{system};
  CoordinatorStats out;
  self->request(cluster.coordinator(), 2s, stats_atom::value)
      .receive([&](const CoordinatorStats& s) { out = s; }, [](const caf::error&) {});
  return out;
}

LoadReport load(caf::actor_system& system, const engine_core_actor& engine) {
  caf::scoped_actor self{system};
  LoadReport out;
  self->request(engine, 2s, get_load_atom::value)
      .receive([&](const LoadReport& l) { out = l; }, [](const caf::error&) {});
  return out;
}

int demo(const std::string& caflm, std::string model) {
  // 1. A model, unless one was given.
  RemovedOnExit written_model;
  if (model.empty()) {
    model = written_model.path = "/tmp/caflm-demo-" + std::to_string(::getpid()) + ".gguf";
    RandomModelSpec spec;
    spec.dim = 256;
    spec.n_layers = 4;
    spec.ffn_dim = 512;
    spec.context_length = 512;
    write_demo_model(spec, model);
    std::printf("wrote a random model to %s\n", model.c_str());
  }

  // 2. Two worker processes, one OpenMP thread each: they and this program
  //    share the machine's cores.
  ::setenv("OMP_NUM_THREADS", "1", 1);
  Worker a("A", caflm, model);
  Worker b("B", caflm, model);
  std::printf("worker A listens on %s, worker B on %s\n", a.address().c_str(), b.address().c_str());

  // 3. A cluster over both, in this process's actor system.
  caf::actor_system_config config;
  add_message_types(config);
  config.set("logger.console-verbosity", caf::atom("quiet"));
  config.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system system{config};
  ClusterOptions options;
  options.replicas = 0;
  options.workers = {a.address(), b.address()};
  Cluster cluster{system, options};
  for (int i = 0; i < 250 && stats(system, cluster).engines < 2; ++i)
    std::this_thread::sleep_for(20ms);
  if (stats(system, cluster).engines < 2) {
    std::printf("FAILED: the cluster did not connect to both workers\n");
    return 1;
  }
  std::printf("the cluster is connected to both workers\n\n");

  // 4. A fault-free run, to compare against.
  Progress calm;
  std::vector<GenerationResult> expected = run(cluster, calm);
  std::printf("fault-free run: %zu requests of %u tokens each\n\n", expected.size(), kMaxTokens);

  // 5. The same requests again; B is killed once every request has a few
  //    tokens (B's requests mid-stream, A's too).
  Progress progress;
  auto running = std::async(std::launch::async, [&] { return run(cluster, progress); });
  auto all_streaming = [&] {
    for (std::size_t i = 0; i < kRequests; ++i)
      if (progress.tokens[i] < 4 && !progress.finished[i])
        return false;
    return true;
  };
  for (auto give_up = std::chrono::steady_clock::now() + 20s;
       !all_streaming() && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(1ms);
  LoadReport b_load = load(system, cluster.engines()[1]);
  b.kill();
  std::printf("SIGKILLed worker B while it ran %u requests; tokens streamed so far:\n",
              b_load.running);
  for (std::size_t i = 0; i < kRequests; ++i)
    std::printf("  request %zu: %zu tokens\n", i + 1, progress.tokens[i].load());
  std::vector<GenerationResult> results = running.get();

  // 6. Every request finished, with the fault-free text.
  std::printf("\n");
  bool all_equal = true;
  for (std::size_t i = 0; i < kRequests; ++i) {
    const GenerationResult& r = results[i];
    bool same = r.ok && r.tokens == expected[i].tokens && r.text == expected[i].text;
    all_equal = all_equal && same;
    std::printf("request %zu: %s, %zu tokens, %s the fault-free run\n  \"%s\"\n", i + 1,
                r.ok ? to_string(r.finish) : r.error.message.c_str(), r.tokens.size(),
                same ? "same as" : "DIFFERENT from", one_line(r.text).c_str());
  }
  CoordinatorStats after = stats(system, cluster);
  std::printf("\nthe coordinator routed %llu times for %zu requests: %llu moved from B to A\n",
              static_cast<unsigned long long>(after.routed), 2 * kRequests,
              static_cast<unsigned long long>(after.routed - 2 * kRequests));
  bool moved = after.routed > 2 * kRequests;
  std::printf("%s\n",
              all_equal && moved ? "OK: every stream survived the kill unchanged" : "FAILED");
  cluster.shutdown();
  return all_equal && moved ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  std::string model;
  std::string caflm =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / ".." / "apps" / "caflm")
          .lexically_normal()
          .string();
  for (int i = 1; i < argc; i += 2) {
    std::string option = argv[i];
    if (i + 1 < argc && option == "--model") {
      model = argv[i + 1];
    } else if (i + 1 < argc && option == "--caflm") {
      caflm = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--model FILE] [--caflm PATH]\n", argv[0]);
      return 1;
    }
  }
  try {
    return demo(caflm, model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_process_demo: %s\n", e.what());
    return 1;
  }
}
