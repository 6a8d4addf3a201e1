// One `caflm worker` process shared the way a cluster shares it: several
// independent clients (`caflm generate` processes) at once, all numbering
// their requests 1, 2, 3...; long prompts over shared prefixes against a
// 1 MiB KV cache; a queue so small that most requests meet backpressure;
// and the model file replaced or truncated under the running worker. Every
// request that fits must come back with the tokens a run on its own gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"
#include "tests/support/cli_harness.hpp"
#include "tests/support/worker_process.hpp"

using namespace caflm::testing;

namespace {

/// The dim-64, two-layer model of the reports (context 2048: a
/// 1 MiB cache holds 128 blocks of 16), written once for this binary.
const std::string& model_path() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string out = (dir / "shared.gguf").string();
    Run run = make_small_model(out, {"llama", "f32", "192", "1", {}});
    REQUIRE(run.exit_code == 0);
    return out;
  }();
  return path;
}

/// A JSONL file of requests numbered 1..n, as every client numbers them.
std::string requests_jsonl(const std::vector<std::string>& prompts, std::uint32_t max_tokens,
                           std::uint64_t seed_base) {
  std::string out;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    nlohmann::json line{{"id", i + 1},        {"prompt", prompts[i]},  {"max_tokens", max_tokens},
                        {"temperature", 0.8}, {"seed", seed_base + i}, {"ignore_eos", true}};
    out += line.dump() + "\n";
  }
  return out;
}

/// Tokens by request id from a generate run's output; every line must be
/// a success.
std::map<std::uint64_t, std::vector<std::uint32_t>> results(const Run& run) {
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  std::map<std::uint64_t, std::vector<std::uint32_t>> out;
  std::istringstream in(run.out);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    INFO(line);
    REQUIRE(j.contains("tokens"));
    out[j["id"].get<std::uint64_t>()] = j["tokens"].get<std::vector<std::uint32_t>>();
  }
  return out;
}

/// What the requests give on a local engine of their own, one at a time.
std::map<std::uint64_t, std::vector<std::uint32_t>> solo(const std::string& jsonl) {
  return results(run_caflm(
      {"generate", "--model", model_path(), "--requests", "-", "--max-in-flight", "1"}, jsonl));
}

/// Runs one `caflm generate --worker` client per request file, all at once,
/// and checks that every client gets every answer, each with the tokens a
/// run on its own gives.
void check_clients_at_once(const WorkerProcess& worker, const std::vector<std::string>& jsonl) {
  std::vector<std::unique_ptr<CaflmRun>> clients;
  for (const std::string& requests : jsonl)
    clients.push_back(std::make_unique<CaflmRun>(
        std::vector<std::string>{"generate", "--worker", worker.address(), "--requests", "-"},
        requests));
  for (std::size_t client = 0; client < clients.size(); ++client) {
    INFO("client " << client);
    auto shared = results(clients[client]->finish());
    const auto alone = solo(jsonl[client]);
    CHECK(shared.size() == alone.size());
    CHECK(shared == alone);
  }
}

std::string words(std::mt19937& rng, std::size_t count) {
  static const std::vector<std::string> vocabulary{
      "the",  "actor", "sends", "a",    "message", "to",    "its",   "worker", "which",
      "runs", "one",   "step",  "over", "every",   "block", "cache", "prefix", "token"};
  std::string out;
  for (std::size_t i = 0; i < count; ++i)
    out += vocabulary[rng() % vocabulary.size()] + " ";
  return out;
}

/// A client node that connects to the worker at `port`, asks it for its
/// load and leaves: a process of its own (a node is a process to CAF).
/// Returns whether it got an answer.
bool visit_worker(std::uint16_t port) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int status = 1;
    {
      caf::actor_system_config cfg;
      caflm::add_message_types(cfg);
      cfg.set("logger.file-verbosity", caf::atom("quiet"));
      cfg.set("logger.console-verbosity", caf::atom("quiet"));
      caf::actor_system system{cfg};
      auto engine = system.middleman().remote_actor<caflm::engine_core_actor>("127.0.0.1", port);
      if (engine) {
        caf::scoped_actor self{system};
        self->request(*engine, std::chrono::seconds(5), caflm::get_load_atom::value)
            .receive([&](const caflm::LoadReport&) { status = 0; }, [](const caf::error&) {});
      }
      // Gone as a crashed client would be: CAF 0.17's actor system can hang
      // in its destructor once it talked to a remote node.
      ::_exit(status);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::size_t resident_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  for (std::size_t value = 0; status >> key;) {
    if (key == "VmRSS:" && status >> value)
      return value;
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

} // namespace

TEST_CASE("a worker's memory does not grow with clients that come and go") {
  // CAF 0.17's middleman kept about 1.3 KB for every node that ever
  // connected; the worker's janitor releases it (every 5 s).
  const char* sanitizers = std::getenv("CAFLM_SANITIZERS");
  if (sanitizers != nullptr && std::strstr(sanitizers, "address") != nullptr) {
    WARN("not measured: AddressSanitizer's quarantine grows resident memory by design");
    return;
  }
  WorkerProcess worker(CAFLM_BINARY, model_path());
  const auto visit_then_settle = [&](int clients) {
    for (int i = 0; i < clients; ++i)
      REQUIRE(visit_worker(worker.port()));
    std::this_thread::sleep_for(std::chrono::seconds(6));
    return static_cast<long>(resident_kib(worker.pid()));
  };
  // Long enough for the allocator to settle: its first few hundred
  // connections grow the heap once, then it stays flat.
  const long warm = visit_then_settle(300);
  const long first = visit_then_settle(600);
  const long second = visit_then_settle(600);
  INFO("resident " << warm << " KiB warm, " << first << " after 600 more clients, " << second
                   << " after 600 more");
  // A leak grows with every client, so it shows in both rounds: 600 x 1.3 KB
  // would be 780 KB each. The allocator's noise comes in single steps (up to
  // 400 KiB seen in a fresh-clone CI run with tests beside), so it may show in
  // one round but not in both.
  CHECK(std::min(first - warm, second - first) < 300);
}

TEST_CASE("independent clients share one worker at once, numbering their requests alike") {
  WorkerProcess worker(CAFLM_BINARY, model_path());
  std::vector<std::string> jsonl;
  std::mt19937 rng(7);
  for (std::uint64_t client = 0; client < 3; ++client) {
    std::vector<std::string> prompts;
    for (int i = 0; i < 6; ++i)
      prompts.push_back("Client " + std::to_string(client) + ": " + words(rng, 20));
    jsonl.push_back(requests_jsonl(prompts, 12, 100 * client));
  }
  check_clients_at_once(worker, jsonl);
}

TEST_CASE("long prompts over shared prefixes against a 1 MiB KV cache all finish") {
  WorkerProcess worker(CAFLM_BINARY, model_path(), 0, std::chrono::seconds(20),
                       {"--kv-cache-mb", "1"});
  std::mt19937 rng(11);
  const std::string shared_prefix = "System: " + words(rng, 180);
  std::vector<std::string> jsonl;
  for (int client = 0; client < 2; ++client) {
    std::vector<std::string> prompts;
    for (int i = 0; i < 8; ++i)
      prompts.push_back(shared_prefix + "User " + std::to_string(i) + ": " +
                        words(rng, 100 + 15 * static_cast<std::size_t>(i)));
    jsonl.push_back(requests_jsonl(prompts, 6, 1000 * client));
  }
  check_clients_at_once(worker, jsonl);
}

TEST_CASE("backpressure from a tiny queue makes requests wait; none is dropped") {
  WorkerProcess worker(CAFLM_BINARY, model_path(), 0, std::chrono::seconds(20),
                       {"--queue", "2", "--max-concurrent", "2"});
  std::vector<std::string> prompts;
  for (int i = 0; i < 300; ++i)
    prompts.push_back("Request " + std::to_string(i));
  Run run = run_caflm({"generate", "--worker", worker.address(), "--requests", "-",
                       "--max-in-flight", "16", "--max-tokens", "2"},
                      requests_jsonl(prompts, 2, 0));
  auto out = results(run);
  CHECK(out.size() == 300);
}

TEST_CASE("a model replaced under a running worker does not change what it serves; one truncated "
          "under it is reported, not a crash") {
  TempDir dir;
  const std::string path = (dir / "served.gguf").string();
  fs::copy_file(model_path(), path);
  WorkerProcess worker(CAFLM_BINARY, path);
  const std::string requests = requests_jsonl({"Once upon a time"}, 8, 5);
  const auto before =
      results(run_caflm({"generate", "--worker", worker.address(), "--requests", "-"}, requests));

  // make-test-model writes a new file and renames it over the old one.
  REQUIRE(make_small_model(path, {"llama", "f32", "192", "2", {}}).exit_code == 0);
  CHECK(results(run_caflm({"generate", "--worker", worker.address(), "--requests", "-"},
                          requests)) == before);

  // Truncating the file a worker maps in place is another matter: its
  // steps fail with the reason, and the worker lives on to say so.
  WorkerProcess victim(CAFLM_BINARY, path);
  fs::resize_file(path, fs::file_size(path) / 2);
  Run run = run_caflm(
      {"generate", "--worker", victim.address(), "--prompt", "Hello", "--max-tokens", "4"});
  INFO(describe(run));
  CHECK(run.exit_code == 1);
  CHECK_FALSE(run.crashed);
  CHECK(run.err.find("model file changed") != std::string::npos);
  CHECK(victim.running());
}
