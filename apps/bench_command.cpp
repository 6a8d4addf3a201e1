#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/allocator/allocator.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "apps/progress_line.hpp"
#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/memory_bandwidth.hpp"
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
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  bool json = false;
  bool kv_waste = true;
};

struct BenchResult {
  std::uint32_t concurrency;
  double prefill_tok_s;
  double decode_tok_s;
  /// The engine's KV cache, and the process's resident set at the end of
  /// the run (the engine still alive).
  std::uint64_t kv_cache_bytes = 0;
  std::uint64_t resident_bytes = 0;
};

/// What the model's work costs per token, from its tensors: to turn token
/// rates into bytes read per second and FLOP/s.
struct ModelCost {
  /// Bytes of weights a decode step reads: every tensor but the token
  /// embedding (of which it gathers one row), unless the output projection
  /// is tied to it.
  double weight_bytes_per_step = 0.0;
  /// 2 * the elements of the layers' matrices: FLOPs per token through them.
  double layer_flops_per_token = 0.0;
  /// 2 * vocab * dim: the output projection, once per sequence in a prefill
  /// (only the last position's logits are computed).
  double output_flops = 0.0;
  /// FLOPs of attention per token per position it attends to (scores and
  /// the weighted sum of values, every layer).
  double attention_flops_per_position = 0.0;
  /// K and V bytes of one position, every layer: what attention reads.
  double kv_bytes_per_position = 0.0;
};

ModelCost model_cost(const Model& model, KvCacheType kv_cache_type) {
  const GgufFile& file = model.file();
  const ModelConfig& config = model.config();
  ModelCost cost;
  const bool tied = file.find_tensor("output.weight") == nullptr;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    const bool embedding = tensor.name == "token_embd.weight";
    if (!embedding || tied)
      cost.weight_bytes_per_step += double(tensor.n_bytes);
    if (tensor.name.rfind("blk.", 0) == 0 && tensor.dims.size() == 2)
      cost.layer_flops_per_token += 2.0 * double(tensor.dims[0]) * double(tensor.dims[1]);
  }
  cost.output_flops = 2.0 * double(config.vocab_size) * double(config.dim);
  cost.attention_flops_per_position =
      4.0 * double(config.n_layers) * double(config.n_heads) * double(config.head_dim);
  cost.kv_bytes_per_position =
      double(cpu_kv_block_bytes(config, kv_cache_type)) / double(kCpuKvBlockSize);
  return cost;
}

/// FLOP/s of a prefill of `prompt`-token sequences at `tok_s` prompt tokens
/// per second.
double prefill_flops_per_second(const ModelCost& cost, std::uint32_t prompt, double tok_s) {
  const double p = prompt;
  const double per_sequence = p * cost.layer_flops_per_token + cost.output_flops +
                              cost.attention_flops_per_position * p * (p + 1.0) / 2.0;
  return per_sequence / p * tok_s;
}

/// Bytes per second a decode of `concurrency` sequences reads at `tok_s`:
/// each step reads the weights once and every sequence's K and V.
double decode_bytes_per_second(const ModelCost& cost, const BenchOptions& options,
                               std::uint32_t concurrency, double tok_s) {
  const double mean_context = options.prompt_tokens + options.gen_tokens / 2.0;
  const double step_bytes =
      cost.weight_bytes_per_step + concurrency * mean_context * cost.kv_bytes_per_position;
  return tok_s / concurrency * step_bytes;
}

/// The process's resident set (VmRSS), or 0 when /proc cannot tell, once
/// the allocator has handed back the pages of what was freed
/// (release_free_memory): what the process holds, not what jemalloc keeps
/// for reuse for a few seconds.
std::uint64_t resident_bytes() {
  release_free_memory();
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024;
  return 0;
}

/// A CPU engine sized by `sizing` (its context and request counts) with KV
/// blocks for every one of `sequences` sequences at full length, and one
/// spare. No prefix caching: random prompts never hit it, and its cached
/// blocks would count as allocated.
std::unique_ptr<InferenceEngine>
make_cpu_bench_engine(const std::shared_ptr<const Model>& model,
                      const std::shared_ptr<const Tokenizer>& tokenizer, EngineOptions sizing,
                      std::uint32_t sequences) {
  const std::uint64_t blocks = std::uint64_t{sequences} * cpu_kv_blocks_for(sizing.max_context) + 1;
  sizing.kv_cache_bytes = blocks * cpu_kv_block_bytes(model->config(), *sizing.kv_cache_type);
  EngineConfig config = cpu_engine_config(*model, sizing);
  config.prefix_caching = false;
  return make_cpu_engine(model, tokenizer, config);
}

/// `count` random tokens below `vocab_size`.
std::vector<TokenId> random_prompt(std::uint32_t count, std::uint32_t vocab_size,
                                   std::mt19937& rng) {
  std::uniform_int_distribution<TokenId> token(0, vocab_size - 1);
  std::vector<TokenId> prompt(count);
  for (TokenId& t : prompt)
    t = token(rng);
  return prompt;
}

/// Adds request `id` to `engine`: `prompt`, then `max_tokens` greedy tokens,
/// end of sequence ignored.
void add_greedy_request(InferenceEngine& engine, std::uint64_t id, std::vector<TokenId> prompt,
                        std::uint32_t max_tokens) {
  GenerationRequest request;
  request.id = id;
  request.prompt = std::move(prompt);
  request.params.temperature = 0.0f;
  request.params.ignore_eos = true;
  request.params.max_tokens = max_tokens;
  if (auto refused = engine.add(std::move(request)))
    throw std::runtime_error(to_string(*refused));
}

/// Like llama.cpp's batched-bench: B sequences each prefill the prompt (all
/// in as few steps as the token budget allows), then decode together.
/// `options` as run_bench resolved them (device and KV cache type set).
BenchResult run_one(const std::shared_ptr<const Model>& model,
                    const std::shared_ptr<const Tokenizer>& tokenizer, const BenchOptions& options,
                    std::uint32_t concurrency) {
  using clock = std::chrono::steady_clock;
  EngineOptions sizing;
  sizing.device = options.device; // resolved by run_bench
  sizing.gpu_memory = options.gpu_memory;
  sizing.kv_cache_type = options.kv_cache_type;
  sizing.max_context = options.prompt_tokens + options.gen_tokens + 1; // checked in run_bench
  sizing.max_requests = sizing.max_running = std::max(concurrency, 1u);
  std::unique_ptr<InferenceEngine> engine;
  std::uint64_t kv_cache_bytes = 0;
  if (options.device == Device::Cpu) {
    engine = make_cpu_bench_engine(model, tokenizer, sizing, concurrency);
    kv_cache_bytes =
        engine->load().total_blocks * cpu_kv_block_bytes(model->config(), *options.kv_cache_type);
  } else {
    // The GPU's KV cache comes from --gpu-memory. Prefix caching stays on:
    // random prompts never hit it.
    engine = make_engine(model, tokenizer, sizing);
  }

  std::mt19937 rng(concurrency);
  // The first token comes from prefill.
  for (std::uint32_t i = 0; i < concurrency; ++i)
    add_greedy_request(*engine, i,
                       random_prompt(options.prompt_tokens, model->config().vocab_size, rng),
                       options.gen_tokens + 1);
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
                     concurrency * options.gen_tokens / seconds(prefilled, done), kv_cache_bytes,
                     resident_bytes()};
}

/// KV cache waste under a mixed workload: `concurrency` sequences with
/// prompts of 1/4 to 2 times --prompt-tokens and replies of 1/4 to 2 times
/// --gen-tokens, all running; at every step, the slots of the blocks the
/// requests hold against those holding a computed token (the blocks of
/// finished requests that only the prefix cache keeps are reported apart:
/// the cache gives them up as soon as a request needs room). Returns the
/// wasted fraction over all steps. `options` as run_bench resolved them.
nlohmann::json measure_kv_waste(const std::shared_ptr<const Model>& model,
                                const std::shared_ptr<const Tokenizer>& tokenizer,
                                const BenchOptions& options, std::uint32_t concurrency) {
  std::mt19937 rng(12345);
  auto between = [&](std::uint32_t low, std::uint32_t high) {
    return std::uniform_int_distribution<std::uint32_t>(std::max(low, 1u), std::max(high, 1u))(rng);
  };
  const std::uint32_t max_prompt = 2 * options.prompt_tokens;
  const std::uint32_t max_gen = 2 * options.gen_tokens;
  EngineOptions sizing;
  sizing.device = Device::Cpu;
  sizing.kv_cache_type = options.kv_cache_type;
  sizing.max_context =
      std::min<std::uint32_t>(max_prompt + max_gen + 1, model->config().context_length);
  sizing.max_requests = sizing.max_running = concurrency;
  auto engine = make_cpu_bench_engine(model, tokenizer, sizing, concurrency);
  for (std::uint32_t i = 0; i < concurrency; ++i) {
    const std::uint32_t length =
        std::min(between(options.prompt_tokens / 4, max_prompt), sizing.max_context - 2);
    std::vector<TokenId> prompt = random_prompt(length, model->config().vocab_size, rng);
    add_greedy_request(*engine, i, std::move(prompt), between(options.gen_tokens / 4, max_gen));
  }
  std::uint64_t allocated = 0, used = 0, cached = 0, steps = 0;
  while (engine->has_work()) {
    engine->step();
    const KvOccupancy occupancy = engine->kv_occupancy();
    allocated += occupancy.allocated_slots;
    used += std::min(occupancy.used_slots, occupancy.allocated_slots);
    cached += occupancy.cached_slots;
    ++steps;
  }
  return {{"sequences", concurrency},
          {"block_size", engine->config().scheduler.block_size},
          {"steps", steps},
          {"allocated_slot_steps", allocated},
          {"used_slot_steps", used},
          {"cached_slot_steps", cached},
          {"waste_fraction", allocated == 0 ? 0.0 : double(allocated - used) / double(allocated)}};
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
  // What the engines keep, as reported. A CUDA engine is passed only what
  // was asked for, so that it warns about an ignored type only when one was.
  const KvCacheType kv_cache_type =
      engine_kv_cache_type(resolved.device, options.kv_cache_type, *model);
  if (resolved.device == Device::Cpu)
    resolved.kv_cache_type = kv_cache_type;
  // A sequence holds the prompt and every generated token but the last.
  const std::uint64_t sequence = std::uint64_t{options.prompt_tokens} + options.gen_tokens + 1;
  if (sequence > model->config().context_length)
    throw std::invalid_argument(
        "--prompt-tokens " + std::to_string(options.prompt_tokens) + " and --gen-tokens " +
        std::to_string(options.gen_tokens) + " need a context of " + std::to_string(sequence) +
        " tokens; the model's holds " + std::to_string(model->config().context_length));
  // Warm-up, as llama.cpp's batched-bench does: the first pass pages the
  // mapped weights in and grows the kernels' per-thread buffers, which no
  // measured size should pay for. A whole prompt, not a few tokens: after a
  // 16-token warm-up the first measured 128-token prefill ran 15-25% slower
  // than the same prefill run again (Q8_0, 134M model, 2-core AMX Xeon).
  ProgressLine progress;
  progress.show("bench: warming up");
  BenchOptions warm_up = resolved;
  warm_up.prompt_tokens = options.prompt_tokens;
  // At most the measured reply, so that it fits the context checked above.
  warm_up.gen_tokens = std::min<std::uint32_t>(options.gen_tokens, 2);
  run_one(model, tokenizer, warm_up, 1);
  const ModelCost cost = model_cost(*model, kv_cache_type);
  const std::uint64_t file_bytes = std::filesystem::file_size(options.model);
  const std::uint64_t resident_after_load = resident_bytes();
  // The machine's read bandwidth, on the threads the CPU runner uses: what
  // a memory-bound decode could reach.
  progress.show("bench: measuring the read bandwidth", /*force=*/true);
  const double bandwidth = resolved.device == Device::Cpu ? measure_read_bandwidth() : 0.0;
  progress.clear();
  nlohmann::json report;
  report["model"] = options.model;
  report["device"] = to_string(resolved.device);
  report["threads"] = omp_get_max_threads();
  if (resolved.device == Device::Cpu)
    report["cpu_kernels"] = to_string(default_matmul_isa());
  report["kv_cache_type"] = to_string(kv_cache_type);
  report["file_bytes"] = file_bytes;
  report["resident_bytes_after_load"] = resident_after_load;
  const std::string allocator = allocator_in_use();
  report["allocator"] = allocator;
  report["read_bandwidth_gb_s"] = bandwidth > 0.0 ? nlohmann::json(bandwidth / 1e9) : nullptr;
  report["weight_bytes_per_decode_step"] = cost.weight_bytes_per_step;
  if (!options.json) {
    // Every weight has been read once now; what is resident beyond the file
    // is the warm-up engine's buffers (freed) and the runtime.
    std::printf("# %s on %s", options.model.c_str(), to_string(resolved.device));
    if (resolved.device == Device::Cpu)
      std::printf(" (%s kernels)", to_string(default_matmul_isa()));
    std::printf(", %d threads, %s KV cache, %s: file %s, resident after load and warm-up %s",
                omp_get_max_threads(), to_string(kv_cache_type), allocator.c_str(),
                human_bytes(file_bytes).c_str(), human_bytes(resident_after_load).c_str());
    if (bandwidth > 0.0)
      std::printf(", read bandwidth %.1f GB/s", bandwidth / 1e9);
    std::printf("\n%6s %14s %14s %14s %14s %10s %12s %12s\n", "B", "prefill tok/s", "decode tok/s",
                "prefill GF/s", "decode GB/s", "of peak", "KV cache", "resident");
  }
  nlohmann::json results = nlohmann::json::array();
  for (std::size_t size = 0; size < options.concurrency.size(); ++size) {
    const std::uint32_t b = options.concurrency[size];
    progress.show(fmt::format("bench: {} sequence(s) of {} + {} tokens ({} of {})", b,
                              options.prompt_tokens, options.gen_tokens, size + 1,
                              options.concurrency.size()),
                  /*force=*/true);
    BenchResult r = run_one(model, tokenizer, resolved, b);
    progress.clear();
    const double gflops =
        prefill_flops_per_second(cost, options.prompt_tokens, r.prefill_tok_s) / 1e9;
    const double read = decode_bytes_per_second(cost, options, b, r.decode_tok_s);
    const double fraction = bandwidth > 0.0 ? read / bandwidth : 0.0;
    nlohmann::json row{
        {"device", to_string(resolved.device)},
        {"concurrency", b},
        {"prefill_tok_s", r.prefill_tok_s},
        {"decode_tok_s", r.decode_tok_s},
        {"prefill_gflop_s", gflops},
        {"decode_read_gb_s", read / 1e9},
        {"decode_bandwidth_fraction", bandwidth > 0.0 ? nlohmann::json(fraction) : nullptr},
        {"kv_cache_bytes", r.kv_cache_bytes},
        {"resident_bytes", r.resident_bytes}};
    results.push_back(row);
    if (!options.json)
      std::printf("%6u %14.1f %14.1f %14.1f %14.1f %9.0f%% %12s %12s\n", b, r.prefill_tok_s,
                  r.decode_tok_s, gflops, read / 1e9, fraction * 100.0,
                  human_bytes(r.kv_cache_bytes).c_str(), human_bytes(r.resident_bytes).c_str());
  }
  report["results"] = std::move(results);
  if (options.kv_waste && resolved.device == Device::Cpu) {
    const std::uint32_t sequences =
        *std::max_element(options.concurrency.begin(), options.concurrency.end());
    progress.show(fmt::format("bench: KV cache waste of {} mixed sequences", sequences),
                  /*force=*/true);
    report["kv_waste"] = measure_kv_waste(model, tokenizer, resolved, sequences);
    progress.clear();
    if (!options.json)
      std::printf("# KV cache waste, %u mixed sequences: %.2f%% of allocated slots unused\n",
                  sequences, 100.0 * report["kv_waste"]["waste_fraction"].get<double>());
  }
  if (options.json)
    std::printf("%s\n", report.dump().c_str());
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
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_flag("--json", options->json,
                "Print one JSON object: the machine, and a result per batch size");
  cmd->add_flag("!--no-kv-waste", options->kv_waste,
                "Skip the KV cache waste measurement (a mixed workload after the sizes)");
  cmd->callback([options] { run_bench(*options); });
}

} // namespace caflm::apps
