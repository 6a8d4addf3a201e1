#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
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

/// Reads one JSONL request; the command line's sampling options are the
/// defaults.
GenerateRequest parse_request_line(const std::string& line, const SamplingParams& defaults,
                                   std::size_t line_number, nlohmann::json& id) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("line " + std::to_string(line_number) + ": " + e.what());
  }
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
    throw std::invalid_argument("line " + std::to_string(line_number) +
                                ": expected an object with a string \"prompt\"");
  id = j.value("id", nlohmann::json(line_number));
  GenerateRequest request;
  request.prompt = j["prompt"].get<std::string>();
  request.params = defaults;
  try {
    SamplingParams& p = request.params;
    p.max_tokens = j.value("max_tokens", p.max_tokens);
    p.temperature = j.value("temperature", p.temperature);
    p.top_p = j.value("top_p", p.top_p);
    p.top_k = j.value("top_k", p.top_k);
    p.min_p = j.value("min_p", p.min_p);
    if (j.contains("seed"))
      p.seed = j["seed"].get<std::uint64_t>();
    p.ignore_eos = j.value("ignore_eos", p.ignore_eos);
    if (j.contains("stop"))
      p.stop = j["stop"].is_string() ? std::vector<std::string>{j["stop"].get<std::string>()}
                                     : j["stop"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("line " + std::to_string(line_number) + ": " + e.what());
  }
  return request;
}

void run_requests_file(Cluster& cluster, const GenerateOptions& options) {
  std::ifstream in(options.requests_file);
  if (!in)
    throw std::runtime_error("cannot read " + options.requests_file);
  std::vector<std::pair<nlohmann::json, GenerateRequest>> requests;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    nlohmann::json id;
    GenerateRequest request = parse_request_line(line, options.params, number, id);
    request.id = requests.size();
    requests.emplace_back(std::move(id), std::move(request));
  }
  // All at once; each answer printed as it completes.
  std::vector<std::future<GenerationResult>> pending;
  for (auto& entry : requests)
    pending.push_back(cluster.generate_async(std::move(entry.second)));
  int failures = 0;
  std::vector<bool> printed(requests.size(), false);
  for (std::size_t done = 0; done < pending.size();) {
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (printed[i] ||
          pending[i].wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
        continue;
      GenerationResult r = pending[i].get();
      nlohmann::ordered_json j;
      j["id"] = requests[i].first;
      if (r.ok) {
        j["tokens"] = r.tokens;
        j["text"] = r.text;
        j["finish_reason"] = to_string(r.finish);
      } else {
        ++failures;
        j["error"] = {{"code", to_string(r.error.code)}, {"message", r.error.message}};
      }
      std::printf("%s\n", dump(j).c_str());
      std::fflush(stdout);
      printed[i] = true;
      ++done;
    }
  }
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

void run_generate(GenerateOptions& options) {
  if (auto problem = validate(options.params))
    throw std::invalid_argument(*problem);
  if (options.prompt.empty() == options.requests_file.empty())
    throw std::invalid_argument("give exactly one of --prompt and --requests");
  ClusterOptions cluster_options;
  cluster_options.model_path = options.model;
  cluster_options.workers = options.workers;
  // With workers and no --replicas, only the workers serve.
  cluster_options.replicas =
      options.workers.empty() || options.replicas_given ? options.replicas : 0;
  if (cluster_options.replicas > 0 && options.model.empty())
    throw std::invalid_argument("local replicas need --model");
  if (cluster_options.replicas == 0 && options.workers.empty())
    throw std::invalid_argument("no engine: give --replicas or --worker");
  caf::actor_system_config config;
  caf::actor_system system{configure(config)};
  Cluster cluster{system, cluster_options};
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
  cmd->add_option("--requests", options->requests_file,
                  "JSONL file, one request per line: {\"id\", \"prompt\", \"max_tokens\", "
                  "\"temperature\", \"top_p\", \"seed\", \"ignore_eos\"}");
  cmd->add_option_function<std::uint32_t>(
      "--replicas",
      [options](std::uint32_t n) {
        options->replicas = n;
        options->replicas_given = true;
      },
      "Local engines (default 1; 0 with --worker)");
  cmd->add_option("--worker", options->workers, "A caflm worker as HOST:PORT (repeatable)");
  cmd->add_option("--max-tokens", p.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", p.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: all)");
  cmd->add_option("--top-p", p.top_p, "Nucleus sampling threshold");
  cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p times the best probability");
  cmd->add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--presence-penalty", p.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty");
  cmd->add_option_function<std::uint64_t>(
      "--seed", [options](std::uint64_t seed) { options->params.seed = seed; },
      "Sampling seed (default: a random one)");
  cmd->add_option("--stop", p.stop, "Stop string (repeatable); it is not printed");
  cmd->add_flag("--ignore-eos", p.ignore_eos, "Never stop at end-of-sequence");
  cmd->add_option("--top-logprobs", p.top_logprobs, "Report the k most likely tokens per step");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of streaming text");
  cmd->callback([options] { run_generate(*options); });
}

} // namespace caflm::apps
