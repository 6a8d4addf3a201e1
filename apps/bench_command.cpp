#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/engine_factory.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm::apps {

namespace {

struct BenchOptions {
  std::string model;
  std::uint32_t prompt_tokens = 128;
  std::uint32_t gen_tokens = 64;
  std::vector<std::uint32_t> concurrency{1, 4, 16, 32};
  Device device = Device::Auto;
  GpuMemory gpu_memory;
  bool json = false;
};

struct BenchResult {
  std::uint32_t concurrency;
  double prefill_tok_s;
  double decode_tok_s;
};

/// The process's resident set (VmRSS), or 0 when /proc cannot tell.
std::uint64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024;
  return 0;
}

/// Like llama.cpp's batched-bench: B sequences each prefill the prompt (all
/// in as few steps as the token budget allows), then decode together.
BenchResult run_one(const std::shared_ptr<const Model>& model,
                    const std::shared_ptr<const Tokenizer>& tokenizer, const BenchOptions& options,
                    std::uint32_t concurrency) {
  using clock = std::chrono::steady_clock;
  EngineOptions sizing;
  sizing.device = options.device; // resolved by run_bench
  sizing.gpu_memory = options.gpu_memory;
  sizing.max_context = options.prompt_tokens + options.gen_tokens + 1; // checked in run_bench
  sizing.max_requests = sizing.max_running = std::max(concurrency, 1u);
  std::unique_ptr<InferenceEngine> engine;
  if (options.device == Device::Cpu) {
    // KV blocks for every sequence at full length, and one spare.
    const std::uint64_t blocks =
        std::uint64_t{concurrency} * cpu_kv_blocks_for(sizing.max_context) + 1;
    sizing.kv_cache_bytes = blocks * cpu_kv_block_bytes(model->config());
    EngineConfig config = cpu_engine_config(*model, sizing);
    config.prefix_caching = false;
    engine = make_cpu_engine(model, tokenizer, config);
  } else {
    // The GPU's KV cache comes from --gpu-memory. Prefix caching stays on:
    // random prompts never hit it.
    engine = make_engine(model, tokenizer, sizing);
  }

  std::mt19937 rng(concurrency);
  std::uniform_int_distribution<TokenId> token(0, model->config().vocab_size - 1);
  for (std::uint32_t i = 0; i < concurrency; ++i) {
    GenerationRequest request;
    request.id = i;
    for (std::uint32_t t = 0; t < options.prompt_tokens; ++t)
      request.prompt.push_back(token(rng));
    request.params.temperature = 0.0f;
    request.params.ignore_eos = true;
    request.params.max_tokens = options.gen_tokens + 1; // the first comes from prefill
    if (auto refused = engine->add(request))
      throw std::runtime_error(to_string(*refused));
  }
  // Prefill ends when every sequence has its first token. Sequences whose
  // prompts fit in an earlier step already decode while later prompts
  // prefill, so count sequences, not events.
  auto start = clock::now();
  std::vector<bool> has_first_token(concurrency, false);
  std::uint32_t first_tokens = 0;
  while (first_tokens < concurrency)
    for (const TokenEvent& event : engine->step())
      if (!has_first_token[event.request_id]) {
        has_first_token[event.request_id] = true;
        ++first_tokens;
      }
  auto prefilled = clock::now();
  while (engine->has_work())
    engine->step();
  auto done = clock::now();
  auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  return BenchResult{concurrency, concurrency * options.prompt_tokens / seconds(start, prefilled),
                     concurrency * options.gen_tokens / seconds(prefilled, done)};
}

void run_bench(const BenchOptions& options) {
  // No prompt leaves nothing to prefill, no generated tokens nothing to decode.
  if (options.prompt_tokens == 0 || options.gen_tokens == 0)
    throw std::invalid_argument("--prompt-tokens and --gen-tokens must be at least 1");
  // Checked before any run, so a bad size does not cut a table short.
  for (std::uint32_t b : options.concurrency)
    if (b == 0)
      throw std::invalid_argument("--concurrency sizes must be at least 1");
  BenchOptions resolved = options;
  resolved.device = resolve_device(options.device);
  auto model = Model::load(options.model);
  auto tokenizer = load_tokenizer(*model);
  // A sequence holds the prompt and every generated token but the last.
  const std::uint64_t sequence = std::uint64_t{options.prompt_tokens} + options.gen_tokens + 1;
  if (sequence > model->config().context_length)
    throw std::invalid_argument(
        "--prompt-tokens " + std::to_string(options.prompt_tokens) + " and --gen-tokens " +
        std::to_string(options.gen_tokens) + " need a context of " + std::to_string(sequence) +
        " tokens; the model's holds " + std::to_string(model->config().context_length));
  // Warm-up, as llama.cpp's batched-bench does: the first pass pages the
  // mapped weights in, which no measured size should pay for.
  BenchOptions warm_up = resolved;
  warm_up.prompt_tokens = std::min<std::uint32_t>(options.prompt_tokens, 16);
  warm_up.gen_tokens = 2;
  run_one(model, tokenizer, warm_up, 1);
  nlohmann::json results = nlohmann::json::array();
  if (!options.json) {
    // Every weight has been read once now; what is resident beyond the file
    // is the warm-up engine's buffers (freed) and the runtime.
    std::printf("# %s on %s: file %s, resident after load and warm-up %s\n", options.model.c_str(),
                to_string(resolved.device),
                human_bytes(std::filesystem::file_size(options.model)).c_str(),
                human_bytes(resident_bytes()).c_str());
    std::printf("%6s %16s %16s\n", "B", "prefill tok/s", "decode tok/s");
  }
  for (std::uint32_t b : options.concurrency) {
    BenchResult r = run_one(model, tokenizer, resolved, b);
    if (options.json)
      results.push_back({{"device", to_string(resolved.device)},
                         {"concurrency", b},
                         {"prefill_tok_s", r.prefill_tok_s},
                         {"decode_tok_s", r.decode_tok_s}});
    else
      std::printf("%6u %16.1f %16.1f\n", b, r.prefill_tok_s, r.decode_tok_s);
  }
  if (options.json)
    std::printf("%s\n", results.dump().c_str());
}

} // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode throughput");
  cmd->add_option("--model", options->model, "GGUF model file")->required();
  cmd->add_option("--prompt-tokens", options->prompt_tokens, "Prompt length")
      ->capture_default_str();
  cmd->add_option("--gen-tokens", options->gen_tokens, "Tokens decoded per sequence")
      ->capture_default_str();
  cmd->add_option("--concurrency", options->concurrency, "Batch sizes, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  add_device_options(*cmd, options->device, options->gpu_memory);
  cmd->add_flag("--json", options->json, "Print a JSON array");
  cmd->callback([options] { run_bench(*options); });
}

} // namespace caflm::apps
