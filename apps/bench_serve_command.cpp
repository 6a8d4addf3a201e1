// `caflm bench-serve`: a load test of an OpenAI-compatible server, like
// vLLM's benchmark_serving.py with its random dataset. Requests arrive as a
// gamma process, each a random-token prompt streamed back with ignore_eos;
// the report gives throughput and the TTFT, TPOT, ITL and end-to-end latency
// distributions.
//
// What is measured, per request, from the moment it is sent (after waiting
// for a slot under --max-concurrency; the wait itself is in the JSON as
// sent_s - arrival_s):
// - TTFT: until the first chunk whose text (or token_ids) is not empty;
// - ITL: the gaps between that chunk and each later one with text. A chunk
//   may carry several tokens, so an ITL is a gap between chunks, not tokens;
// - output tokens: usage.completion_tokens from the final usage chunk
//   (requested with stream_options.include_usage), or, when the server sends
//   no usage, the number of chunks with text (the table then says so);
// - TPOT: (E2E - TTFT) / (output tokens - 1), for requests of 2+ tokens;
// - E2E: until the response ended.
// A request fails on an HTTP status other than 200, a connection or read
// error, a `data: {"error": ...}` event or a stream without `data: [DONE]`.
//
// Prompts are token id arrays ("prompt": [ids], which OpenAI servers
// accept), ids uniform in [0, --vocab-size): GET /v1/models does not tell a
// model's vocabulary, so the default 32000 must be lowered for smaller ones.
// Random ids may decode to text that tokenizes differently; that does not
// matter because the server receives the ids, not the text.

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/bench_serve/latency_plot.hpp"
#include "apps/bench_serve/load_generator.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"

namespace caflm::apps {

namespace {

using namespace bench_serve;

struct BenchServeOptions {
  std::string url;
  std::uint32_t requests = 100;
  std::string rate = "inf";
  double burstiness = 1.0;
  std::uint32_t max_concurrency = 0;
  std::uint32_t input_len = 128;
  std::uint32_t output_len = 64;
  double range_ratio = 0.0;
  std::uint32_t prefix_len = 0;
  std::uint32_t num_prefixes = 1;
  std::uint64_t seed = 0;
  std::uint32_t vocab_size = 32000;
  std::string model;
  std::string api_key;
  double request_timeout_s = 300;
  std::string json_path;
  std::string plot_path;
};

/// --rate: requests per second, a positive number or "inf".
double parse_rate(const std::string& text) {
  if (text == "inf" || text == "infinity" || text == "INF")
    return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  errno = 0;
  const double rate = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(rate > 0))
    throw std::invalid_argument("--rate " + text +
                                ": must be a positive number of requests per second, or inf");
  return rate;
}

void check_options(const BenchServeOptions& options) {
  if (!(options.burstiness > 0) || !std::isfinite(options.burstiness))
    throw std::invalid_argument("--burstiness " + std::to_string(options.burstiness) +
                                ": must be a positive number (1 is a Poisson process)");
  if (!(options.range_ratio >= 0 && options.range_ratio < 1))
    throw std::invalid_argument("--range-ratio " + std::to_string(options.range_ratio) +
                                ": must be at least 0 and below 1");
  if (!(options.request_timeout_s > 0) || !std::isfinite(options.request_timeout_s))
    throw std::invalid_argument("--request-timeout must be a positive number of seconds");
}

/// Lengths uniform in [L(1-r), L(1+r)], at least `minimum`.
std::uniform_int_distribution<std::uint32_t> length_distribution(std::uint32_t length, double ratio,
                                                                 std::uint32_t minimum) {
  const auto low = static_cast<std::uint32_t>(std::floor(length * (1 - ratio)));
  const auto high = static_cast<std::uint32_t>(std::floor(length * (1 + ratio)));
  return std::uniform_int_distribution<std::uint32_t>(std::max(low, minimum),
                                                      std::max(high, minimum));
}

/// The workload: a shared prefix (one of --num-prefixes, picked at random),
/// then per request a random suffix of
/// about --input-len tokens, an output length of about --output-len, and an
/// arrival time. Gaps between arrivals are gamma distributed with shape
/// --burstiness and mean 1/rate; the first request arrives at 0.
std::vector<PlannedRequest> plan_requests(const BenchServeOptions& options, double rate) {
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<std::int64_t> token(0, options.vocab_size - 1);
  // The first prefix is drawn first, so one prefix gives the prompts it
  // always gave for a seed.
  std::vector<std::vector<std::int64_t>> prefixes(std::max<std::uint32_t>(options.num_prefixes, 1),
                                                  std::vector<std::int64_t>(options.prefix_len));
  for (std::int64_t& id : prefixes[0])
    id = token(rng);
  // A request needs some prompt: with no prefix, at least one token.
  auto input_length =
      length_distribution(options.input_len, options.range_ratio, options.prefix_len > 0 ? 0 : 1);
  auto output_length = length_distribution(options.output_len, options.range_ratio, 1);
  // Shape k and scale 1/(rate k) give the mean gap 1/rate; at rate inf
  // nobody draws from it (a scale of 0 is outside its domain).
  std::gamma_distribution<double> gap(
      options.burstiness, std::isfinite(rate) ? 1.0 / (rate * options.burstiness) : 1.0);

  std::vector<PlannedRequest> plan(options.requests);
  double arrival_s = 0;
  for (std::size_t p = 1; p < prefixes.size(); ++p)
    for (std::int64_t& id : prefixes[p])
      id = token(rng);
  // Each request picks its prefix at random: taking them in turn would line
  // up with a round robin over engines and hand a load-only router a
  // partition of the prefixes for free.
  std::uniform_int_distribution<std::size_t> pick(0, prefixes.size() - 1);
  for (PlannedRequest& request : plan) {
    request.prompt = prefixes.size() == 1 ? prefixes[0] : prefixes[pick(rng)];
    const std::uint32_t length = input_length(rng);
    for (std::uint32_t i = 0; i < length; ++i)
      request.prompt.push_back(token(rng));
    request.max_tokens = output_length(rng);
    request.arrival_s = arrival_s;
    if (std::isfinite(rate))
      arrival_s += gap(rng);
  }
  return plan;
}

/// mean, median, p90, p99 (linear interpolation between ranks, as numpy),
/// in ms; all zero for no values.
struct Distribution {
  double mean = 0, median = 0, p90 = 0, p99 = 0, std = 0;
  std::size_t count = 0;
};

Distribution distribution_of(std::vector<double> values_ms) {
  Distribution d;
  d.count = values_ms.size();
  if (values_ms.empty())
    return d;
  std::sort(values_ms.begin(), values_ms.end());
  double sum = 0;
  for (double value : values_ms)
    sum += value;
  d.mean = sum / values_ms.size();
  double squares = 0;
  for (double value : values_ms)
    squares += (value - d.mean) * (value - d.mean);
  d.std = std::sqrt(squares / values_ms.size());
  auto at = [&](double fraction) {
    const double rank = fraction * static_cast<double>(values_ms.size() - 1);
    const auto below = static_cast<std::size_t>(rank);
    const std::size_t above = std::min(below + 1, values_ms.size() - 1);
    return values_ms[below] +
           (values_ms[above] - values_ms[below]) * (rank - static_cast<double>(below));
  };
  d.median = at(0.5);
  d.p90 = at(0.9);
  d.p99 = at(0.99);
  return d;
}

nlohmann::json to_json(const Distribution& d) {
  return {{"mean", d.mean}, {"median", d.median}, {"p90", d.p90},
          {"p99", d.p99},   {"std", d.std},       {"count", d.count}};
}

struct Summary {
  std::size_t completed = 0, failed = 0;
  double duration_s = 0;
  std::uint64_t input_tokens = 0, output_tokens = 0;
  std::uint64_t cached_tokens = 0;
  bool any_cached = false;
  bool tokens_from_usage = true;
  Distribution ttft, tpot, itl, e2e;
  std::map<std::string, std::size_t> failures;
};

Summary summarize(const std::vector<RequestOutcome>& outcomes) {
  Summary s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestOutcome& outcome : outcomes) {
    s.duration_s = std::max(s.duration_s, outcome.finished_s);
    if (!outcome.success) {
      ++s.failed;
      ++s.failures[outcome.error];
      continue;
    }
    ++s.completed;
    s.input_tokens += outcome.prompt_tokens;
    s.output_tokens += outcome.output_tokens;
    s.tokens_from_usage = s.tokens_from_usage && outcome.output_tokens_from_usage;
    if (outcome.cached_tokens) {
      s.any_cached = true;
      s.cached_tokens += *outcome.cached_tokens;
    }
    const double latency_s = outcome.finished_s - outcome.sent_s;
    e2e.push_back(latency_s * 1e3);
    if (outcome.chunk_times_s.empty())
      continue;
    const double first_s = outcome.chunk_times_s[0] - outcome.sent_s;
    ttft.push_back(first_s * 1e3);
    if (outcome.output_tokens > 1)
      tpot.push_back((latency_s - first_s) / (outcome.output_tokens - 1) * 1e3);
    for (std::size_t i = 1; i < outcome.chunk_times_s.size(); ++i)
      itl.push_back((outcome.chunk_times_s[i] - outcome.chunk_times_s[i - 1]) * 1e3);
  }
  s.ttft = distribution_of(std::move(ttft));
  s.tpot = distribution_of(std::move(tpot));
  s.itl = distribution_of(std::move(itl));
  s.e2e = distribution_of(std::move(e2e));
  return s;
}

double per_second(double amount, double duration_s) {
  return duration_s > 0 ? amount / duration_s : 0;
}

void print_table(const Summary& s, const std::string& rate_text, std::uint32_t max_concurrency) {
  auto line = [](const char* name, const std::string& value) {
    std::printf("%-42s%s\n", name, value.c_str());
  };
  auto number = [](double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return std::string(text);
  };
  auto section = [](const char* title) {
    const int width = 50, text = static_cast<int>(std::string(title).size()) + 2;
    const int left = (width - text) / 2;
    std::printf("%s %s %s\n", std::string(left, '-').c_str(), title,
                std::string(width - text - left, '-').c_str());
  };
  std::printf("%s\n", "============ Serving Benchmark Result ============");
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  line("Request rate (req/s):", rate_text);
  line("Maximum request concurrency:",
       max_concurrency == 0 ? "unbounded" : std::to_string(max_concurrency));
  line("Benchmark duration (s):", number(s.duration_s, 2));
  line("Total input tokens:", std::to_string(s.input_tokens));
  line("Total generated tokens:", std::to_string(s.output_tokens));
  if (s.any_cached)
    line("Cached prompt tokens:", std::to_string(s.cached_tokens));
  line("Request throughput (req/s):", number(per_second(s.completed, s.duration_s), 2));
  line("Output token throughput (tok/s):", number(per_second(s.output_tokens, s.duration_s), 2));
  line("Total token throughput (tok/s):",
       number(per_second(s.input_tokens + s.output_tokens, s.duration_s), 2));
  auto block = [&](const char* title, const char* name, const Distribution& d) {
    section(title);
    line((std::string("Mean ") + name + " (ms):").c_str(), number(d.mean, 2));
    line((std::string("Median ") + name + " (ms):").c_str(), number(d.median, 2));
    line((std::string("P90 ") + name + " (ms):").c_str(), number(d.p90, 2));
    line((std::string("P99 ") + name + " (ms):").c_str(), number(d.p99, 2));
  };
  block("Time to First Token", "TTFT", s.ttft);
  block("Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  block("Inter-token Latency", "ITL", s.itl);
  block("End-to-end Latency", "E2EL", s.e2e);
  if (!s.failures.empty()) {
    section("Failures");
    for (const auto& [reason, count] : s.failures)
      std::printf("%6zu  %s\n", count, reason.c_str());
  }
  std::printf("%s\n", std::string(50, '=').c_str());
  if (!s.tokens_from_usage && s.completed > 0)
    std::printf("note: the server sent no usage for some requests; their output tokens are "
                "counted as chunks with text\n");
  std::fflush(stdout);
}

nlohmann::json report_json(const BenchServeOptions& options, const std::string& model, double rate,
                           const Summary& s, const std::vector<PlannedRequest>& plan,
                           const std::vector<RequestOutcome>& outcomes) {
  nlohmann::json json;
  json["config"] = {
      {"url", options.url},
      {"model", model},
      {"requests", options.requests},
      {"rate", std::isfinite(rate) ? nlohmann::json(rate) : nlohmann::json("inf")},
      {"burstiness", options.burstiness},
      {"max_concurrency",
       options.max_concurrency == 0 ? nlohmann::json() : nlohmann::json(options.max_concurrency)},
      {"input_len", options.input_len},
      {"output_len", options.output_len},
      {"range_ratio", options.range_ratio},
      {"prefix_len", options.prefix_len},
      {"num_prefixes", options.num_prefixes},
      {"seed", options.seed},
      {"vocab_size", options.vocab_size},
  };
  json["completed"] = s.completed;
  json["failed"] = s.failed;
  json["duration_s"] = s.duration_s;
  json["total_input_tokens"] = s.input_tokens;
  json["total_output_tokens"] = s.output_tokens;
  json["cached_prompt_tokens"] = s.any_cached ? nlohmann::json(s.cached_tokens) : nlohmann::json();
  json["output_tokens_from_usage"] = s.tokens_from_usage;
  json["request_throughput"] = per_second(s.completed, s.duration_s);
  json["output_throughput"] = per_second(s.output_tokens, s.duration_s);
  json["total_token_throughput"] = per_second(s.input_tokens + s.output_tokens, s.duration_s);
  json["ttft_ms"] = to_json(s.ttft);
  json["tpot_ms"] = to_json(s.tpot);
  json["itl_ms"] = to_json(s.itl);
  json["e2el_ms"] = to_json(s.e2e);
  json["failures"] = s.failures;
  nlohmann::json requests = nlohmann::json::array();
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const RequestOutcome& o = outcomes[i];
    nlohmann::json r;
    r["index"] = i;
    r["success"] = o.success;
    if (!o.success)
      r["error"] = o.error;
    r["arrival_s"] = o.arrival_s;
    r["sent_s"] = o.sent_s;
    r["finished_s"] = o.finished_s;
    r["prompt_len"] = plan[i].prompt.size();
    r["max_tokens"] = plan[i].max_tokens;
    r["prompt_tokens"] = o.prompt_tokens;
    r["output_tokens"] = o.output_tokens;
    if (o.cached_tokens)
      r["cached_tokens"] = *o.cached_tokens;
    r["ttft_ms"] = o.chunk_times_s.empty() ? nlohmann::json()
                                           : nlohmann::json((o.chunk_times_s[0] - o.sent_s) * 1e3);
    r["e2el_ms"] = (o.finished_s - o.sent_s) * 1e3;
    nlohmann::json itl = nlohmann::json::array();
    for (std::size_t k = 1; k < o.chunk_times_s.size(); ++k)
      itl.push_back((o.chunk_times_s[k] - o.chunk_times_s[k - 1]) * 1e3);
    r["itl_ms"] = std::move(itl);
    r["chunk_times_s"] = o.chunk_times_s;
    requests.push_back(std::move(r));
  }
  json["requests"] = std::move(requests);
  return json;
}

void run_bench_serve(const BenchServeOptions& options) {
  const double rate = parse_rate(options.rate);
  check_options(options);
  LoadOptions load;
  load.url = parse_server_url(options.url);
  load.api_key = options.api_key;
  load.max_concurrency = options.max_concurrency;
  load.idle_timeout_s = options.request_timeout_s;
  raise_open_file_limit();

  // Reaching /v1/models first fails fast, with one clear message, when
  // nothing listens; it also names the model when --model does not.
  const ModelList models = fetch_models(load);
  load.model = options.model;
  if (load.model.empty()) {
    if (models.status != 200)
      throw std::runtime_error("GET " + load.url.to_string() + "/v1/models answered HTTP " +
                               std::to_string(models.status) + " (" + models.error +
                               "); name the model with --model");
    if (models.ids.empty())
      throw std::runtime_error("GET " + load.url.to_string() +
                               "/v1/models lists no model; name it with --model");
    load.model = models.ids.front();
  }

  const std::vector<PlannedRequest> plan = plan_requests(options, rate);
  std::fprintf(stderr, "caflm bench-serve: %u requests to %s (model %s) at %s req/s\n",
               options.requests, load.url.to_string().c_str(), load.model.c_str(),
               options.rate.c_str());
  const std::vector<RequestOutcome> outcomes = run_load(load, plan);
  const Summary summary = summarize(outcomes);
  print_table(summary, std::isfinite(rate) ? options.rate : "inf", options.max_concurrency);

  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path);
    out << report_json(options, load.model, rate, summary, plan, outcomes).dump(2) << '\n';
    out.close();
    if (!out)
      throw std::runtime_error("--json " + options.json_path + ": cannot write the file");
  }
  if (!options.plot_path.empty())
    write_latency_plot(options.plot_path, outcomes);
  if (summary.completed == 0)
    throw std::runtime_error("all " + std::to_string(summary.failed) +
                             " requests failed; first reason: " + outcomes.front().error);
}

} // namespace

void add_bench_serve_command(CLI::App& app) {
  auto options = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-serve", "Load-test an OpenAI-compatible server with streamed random-token prompts");
  cmd->add_option("--url", options->url, "Server, http://host:port[/base]")->required();
  cmd->add_option("--requests", options->requests, "Requests to send")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--rate", options->rate,
                  "Mean arrival rate in requests per second, or inf to send all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", options->burstiness,
                  "Shape of the gamma-distributed gaps between arrivals: 1 is Poisson, below 1 "
                  "burstier, above 1 more regular")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", options->max_concurrency,
                  "Most requests in flight; later arrivals wait for a slot (0: no bound)")
      ->capture_default_str();
  cmd->add_option("--input-len", options->input_len,
                  "Random prompt tokens per request, after the shared prefix")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--output-len", options->output_len, "max_tokens per request (ignore_eos)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--range-ratio", options->range_ratio,
                  "Input and output lengths uniform in [L*(1-r), L*(1+r)]")
      ->capture_default_str();
  cmd->add_option("--prefix-len", options->prefix_len,
                  "Random tokens shared by every prompt, before its own")
      ->capture_default_str();
  cmd->add_option("--num-prefixes", options->num_prefixes,
                  "Distinct shared prefixes, each request picking one at random (more than one "
                  "replica's cache holds shows what prefix-aware routing earns)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the prompts, lengths and arrivals")
      ->capture_default_str();
  cmd->add_option("--vocab-size", options->vocab_size,
                  "Token ids are drawn from [0, V); /v1/models does not tell a model's "
                  "vocabulary, so give it when it is smaller")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--model", options->model,
                  "Model name sent in each request (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", options->api_key, "Sent as Authorization: Bearer KEY");
  cmd->add_option("--request-timeout", options->request_timeout_s,
                  "A request fails after this many seconds without data")
      ->capture_default_str();
  cmd->add_option("--json", options->json_path,
                  "Write the summary and every request's timings as JSON");
  cmd->add_option("--plot", options->plot_path,
                  "Write a PNG of TTFT and ITL percentiles (p50, p90, p99) over time");
  cmd->callback([options] { run_bench_serve(*options); });
}

} // namespace caflm::apps
