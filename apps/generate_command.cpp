#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "apps/progress_line.hpp"
#include "apps/request_file.hpp"
#include "caflm/actors/cluster.hpp"

namespace caflm::apps {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string requests_file;
  SamplingParams params;
  std::uint32_t replicas = 1;
  bool replicas_given = false;
  std::vector<std::string> workers;
  TlsOptions tls;
  RequestLimits requests;
  std::uint64_t kv_cache_mb = 1024;
  Device device = Device::Auto;
  GpuMemory gpu_memory;
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  std::uint32_t max_context = 0;
  std::uint32_t max_in_flight = 64;
  double deadline_s = 0;
  double connect_timeout_s = 10;
  bool json = false;
};

/// One list of [id, logprob] pairs per generated token; empty lists when
/// none were asked for.
nlohmann::ordered_json top_logprobs_json(const GenerationResult& r) {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
    if (i < r.top_logprobs.size())
      for (const TokenLogprob& top : r.top_logprobs[i])
        alternatives.push_back({top.token, top.logprob});
    steps.push_back(std::move(alternatives));
  }
  return steps;
}

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_line(const nlohmann::ordered_json& j) {
  std::printf("%s\n", dump(j).c_str());
  std::fflush(stdout);
}

nlohmann::ordered_json error_json(const nlohmann::json& id, const std::string& code,
                                  const std::string& message) {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["error"] = {{"code", code}, {"message", message}};
  return j;
}

/// Results of requests in flight, handed from the collectors' threads to
/// the main one.
class Completions {
 public:
  void push(std::size_t index, GenerationResult&& result) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      done_.emplace_back(index, std::move(result));
    }
    ready_.notify_one();
  }

  /// Waits for the next result.
  std::pair<std::size_t, GenerationResult> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !done_.empty(); });
    auto next = std::move(done_.front());
    done_.pop_front();
    return next;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<std::size_t, GenerationResult>> done_;
};

/// The requests in `path` (its non-blank lines), for the progress line's
/// total; 0 when it cannot tell ahead (standard input, a pipe).
std::size_t count_request_lines(const std::string& path) {
  if (path == "-" || !std::filesystem::is_regular_file(path))
    return 0;
  std::ifstream file(path);
  std::size_t count = 0;
  for (std::string line; std::getline(file, line);)
    count += line.find_first_not_of(" \t\r") != std::string::npos ? 1 : 0;
  return count;
}

/// Streams the request file: at most `max_in_flight` requests at once (the
/// rest are not even read yet), each answer printed as it completes, in
/// completion order. Backpressure from the engines only makes requests
/// wait; nothing is dropped.
void run_requests_file(Cluster& cluster, const GenerateOptions& options) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (options.requests_file != "-") {
    if (std::filesystem::is_directory(options.requests_file))
      throw std::invalid_argument("--requests " + options.requests_file + " is a directory");
    file.open(options.requests_file);
    if (!file)
      throw std::invalid_argument("cannot read --requests " + options.requests_file + ": " +
                                  std::strerror(errno));
    in = &file;
  }
  // Shared with the collectors, which may outlive this call if it throws.
  auto completions = std::make_shared<Completions>();
  std::vector<nlohmann::json> ids; // by submission index
  std::size_t in_flight = 0;
  std::size_t failures = 0;
  ProgressLine progress;
  const std::size_t total = progress.enabled() ? count_request_lines(options.requests_file) : 0;
  const auto started = std::chrono::steady_clock::now();
  std::uint64_t tokens = 0;
  auto show_progress = [&](bool force) {
    const std::size_t done = ids.size() - in_flight;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    progress.show(fmt::format("requests {}/{} done, {} failed, {:.0f} tok/s", done,
                              total > 0 ? std::to_string(total) : std::string("?"), failures,
                              elapsed > 0.0 ? double(tokens) / elapsed : 0.0),
                  force);
  };
  // A result on the same terminal goes on a line of its own.
  auto print_result = [&](const auto& json) {
    progress.clear();
    print_line(json);
    show_progress(/*force=*/true);
  };
  auto print_next = [&] {
    auto [index, r] = completions->pop();
    --in_flight;
    tokens += r.tokens.size();
    if (!r.ok) {
      ++failures;
      print_result(error_json(ids[index], to_string(r.error.code), r.error.message));
      return;
    }
    nlohmann::ordered_json j;
    j["id"] = ids[index];
    j["tokens"] = r.tokens;
    j["text"] = r.text;
    j["finish_reason"] = to_string(r.finish);
    print_result(j);
  };
  std::string line;
  for (std::size_t number = 1; std::getline(*in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    RequestLine parsed;
    try {
      parsed = parse_request_line(line, number, options.params);
    } catch (const std::invalid_argument& e) {
      // Reported as this request's answer; the others still run.
      ++failures;
      progress.clear();
      std::fprintf(stderr, "caflm: %s\n", e.what());
      print_result(error_json(nlohmann::json(number), "bad_request", e.what()));
      continue;
    }
    while (in_flight >= options.max_in_flight)
      print_next();
    const std::size_t index = ids.size();
    ids.push_back(std::move(parsed.id));
    parsed.request.id = index;
    ++in_flight;
    show_progress(/*force=*/false);
    cluster.generate_async(std::move(parsed.request), [completions, index](GenerationResult&& r) {
      completions->push(index, std::move(r));
    });
  }
  if (in->bad())
    throw std::runtime_error("reading --requests " + options.requests_file + " failed");
  while (in_flight > 0)
    print_next();
  progress.clear();
  if (failures > 0)
    throw std::runtime_error(std::to_string(failures) + " request(s) failed");
}

void run_prompt(Cluster& cluster, const GenerateOptions& options) {
  GenerateRequest request;
  request.id = 1;
  request.prompt = options.prompt;
  request.params = options.params;
  ChunkObserver print_text;
  if (!options.json)
    print_text = [](const TokenChunk& chunk) {
      std::fputs(chunk.text.c_str(), stdout);
      std::fflush(stdout);
    };
  GenerationResult r = cluster.generate_async(std::move(request), print_text).get();
  if (!r.ok)
    throw std::runtime_error(std::string(to_string(r.error.code)) + ": " + r.error.message);
  if (!options.json) {
    std::printf("\n");
    return;
  }
  nlohmann::ordered_json out{{"prompt_tokens", r.prompt_tokens},
                             {"tokens", r.tokens},
                             {"text", r.text},
                             {"finish_reason", to_string(r.finish)},
                             {"top_logprobs", top_logprobs_json(r)}};
  std::printf("%s\n", dump(out).c_str());
}

std::chrono::milliseconds seconds_option(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

void run_generate(GenerateOptions& options, caf::actor_system& system) {
  if (auto problem = validate(options.params))
    throw std::invalid_argument(*problem);
  if (options.prompt.empty() == options.requests_file.empty())
    throw std::invalid_argument("give exactly one of --prompt and --requests");
  ClusterOptions cluster_options;
  cluster_options.model_path = options.model;
  cluster_options.workers = options.workers;
  cluster_options.tls = options.tls;
  // With workers and no --replicas, only the workers serve.
  cluster_options.replicas =
      options.workers.empty() || options.replicas_given ? options.replicas : 0;
  if (cluster_options.replicas > 0 && options.model.empty())
    throw std::invalid_argument("local replicas need --model");
  if (cluster_options.replicas == 0 && options.workers.empty())
    throw std::invalid_argument("no engine: give --replicas or --worker");
  cluster_options.kv_cache_bytes = mebibytes(options.kv_cache_mb, "--kv-cache-mb");
  cluster_options.kv_cache_type = options.kv_cache_type;
  cluster_options.device = options.device;
  cluster_options.gpu_memory = options.gpu_memory;
  cluster_options.max_context = options.max_context;
  cluster_options.requests = options.requests;
  cluster_options.request.deadline = seconds_option(options.deadline_s);
  Cluster cluster{system, cluster_options};
  if (!options.workers.empty()) {
    // A worker that refuses or never answers is named now, not after the
    // first request has waited out its deadline.
    auto unreachable = cluster.await_workers(seconds_option(options.connect_timeout_s));
    if (!unreachable.empty() && unreachable.size() == options.workers.size() &&
        cluster_options.replicas == 0) {
      std::string list;
      for (const std::string& worker : unreachable)
        list += "\n  " + worker;
      throw std::runtime_error(fmt::format("no worker could be reached within {:g} s:{}",
                                           options.connect_timeout_s, list));
    }
    for (const std::string& worker : unreachable)
      std::fprintf(stderr, "caflm: going on without worker %s\n", worker.c_str());
  }
  if (options.requests_file.empty())
    run_prompt(cluster, options);
  else
    run_requests_file(cluster, options);
}

} // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  SamplingParams& p = options->params;
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt or a JSONL file");
  cmd->add_option("--model", options->model, "GGUF model file (for local replicas)");
  cmd->add_option("--prompt", options->prompt, "Prompt text");
  cmd->add_option("--requests", options->requests_file, kRequestFileHelp);
  cmd->add_option("--max-in-flight", options->max_in_flight,
                  "Requests of --requests submitted at once")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option_function<std::uint32_t>(
      "--replicas",
      [options](std::uint32_t n) {
        options->replicas = n;
        options->replicas_given = true;
      },
      "Local engines (default 1; 0 with --worker)");
  cmd->add_option("--worker", options->workers, "A caflm worker as HOST:PORT (repeatable)");
  cmd->add_option("--connect-timeout", options->connect_timeout_s,
                  "Seconds to wait for the workers to answer before giving up on them")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_tls_options(*cmd, options->tls);
  add_request_limit_options(*cmd, options->requests);
  add_device_options(*cmd, options->device, options->gpu_memory);
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_option("--kv-cache-mb", options->kv_cache_mb, "KV cache of each local replica, MiB")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-context", options->max_context,
                  "Longest sequence of a local replica (0: the model's)")
      ->capture_default_str();
  cmd->add_option("--deadline", options->deadline_s,
                  "Seconds a request may take in all, waiting included (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_sampling_options(*cmd, p, "Tokens to generate at most");
  cmd->add_option("--top-logprobs", p.top_logprobs, "Report the k most likely tokens per step");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of streaming text");
  cmd->callback([options] {
    run_in_actor_system([&](caf::actor_system& system) { run_generate(*options, system); },
                        options->tls);
  });
}

} // namespace caflm::apps
