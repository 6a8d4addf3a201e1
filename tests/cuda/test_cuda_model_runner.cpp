// The CUDA model runner on whole models: its logits against the CPU runner's
// driven with the same ragged batches (F32 and quantized weights, every
// architecture, paged KV shared between sequences, copy-on-write), bitwise
// batch invariance on the device (other items, item order, prefill chunk vs.
// decode, CUDA graphs on and off, graph buckets), device sampling against the
// host Sampler, and engines over the runner (llama.cpp's reference outputs,
// preemption, the CPU engine's tokens). Every GPU case starts with
// CAFLM_REQUIRE_GPU() and passes with "skipped: <reason>" without a device;
// the host-side sizing functions are tested everywhere.

#include "caflm/cuda/cuda_model_runner.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "caflm/cpu/cpu_model_runner.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/cuda_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/gguf/quantize.hpp"
#include "caflm/model/model.hpp"
#include "caflm/model/random_model.hpp"
#include "caflm/sampling/philox.hpp"
#include "caflm/sampling/sampler.hpp"
#include "tests/cuda/gpu_test.hpp"
#include "tests/support/model_harness.hpp"

using namespace caflm;
using caflm::cuda::CudaModelRunner;
using caflm::cuda::CudaRunnerOptions;
using caflm::testing::path_from_env;
using caflm::testing::random_tokens;

namespace {

// Small blocks, so that short sequences span several and share whole ones.
constexpr std::uint32_t kBlockSize = 4;
constexpr std::uint32_t kMaxTokens = 160;
// 32 items: a decode step of 17 items still has a graph bucket (32); the
// runner captures no graph wider than its logits rows.
constexpr std::uint32_t kMaxItems = 32;
constexpr std::uint32_t kMaxContext = 256;
constexpr std::uint32_t kKvBlocks = 512;

/// A model small enough to run quickly on the CPU reference, yet with the
/// GPU's real shapes: 256 wide (whole K-quant super-blocks in every row), two
/// layers, 4 query heads over 2 KV heads (GQA) of `head_dim` 64 or 128 (128:
/// q is 512 wide, wider than the model, as in qwen3).
RandomModelSpec gpu_spec(const std::string& architecture, std::uint32_t head_dim,
                         TensorType type = TensorType::F32, QuantMix mix = QuantMix::Uniform,
                         std::uint64_t seed = 17) {
  RandomModelSpec spec = caflm::testing::small_random_spec(architecture, seed);
  spec.dim = 256;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = head_dim == spec.dim / spec.n_heads ? 0 : head_dim;
  spec.ffn_dim = 512;
  spec.context_length = kMaxContext;
  spec.type = type;
  spec.mix = mix;
  return spec;
}

RunnerLimits cpu_limits() {
  return RunnerLimits{kMaxTokens, kMaxItems, kMaxContext, kKvBlocks, kBlockSize};
}

CudaRunnerOptions gpu_options(bool cuda_graphs = true, std::uint32_t max_kv_blocks = kKvBlocks) {
  CudaRunnerOptions options;
  options.device = 0;
  // Far more than these models, their workspace and KV cache take.
  options.memory_budget_bytes = std::uint64_t{2} << 30;
  options.max_tokens = kMaxTokens;
  options.max_items = kMaxItems;
  options.max_context = kMaxContext;
  options.block_size = kBlockSize;
  options.max_kv_blocks = max_kv_blocks;
  options.cuda_graphs = cuda_graphs;
  return options;
}

/// A CUDA runner with the cache the tests address (block ids below kKvBlocks).
std::unique_ptr<CudaModelRunner> make_gpu_runner(std::shared_ptr<const Model> model,
                                                 bool cuda_graphs = true,
                                                 bool programmatic_launch = false) {
  CudaRunnerOptions options = gpu_options(cuda_graphs);
  options.programmatic_launch = programmatic_launch;
  auto runner = std::make_unique<CudaModelRunner>(model, options);
  REQUIRE(runner->kv_blocks() >= kKvBlocks);
  REQUIRE(runner->vocab_size() == model->config().vocab_size);
  REQUIRE(runner->samples_on_device());
  return runner;
}

/// `model` with every quantized matrix decoded to F32 (dequantize_row, the
/// decoding the GPU's matrix kernels reproduce), metadata and everything else
/// unchanged. The CPU runner over it multiplies exactly the weight values the
/// GPU multiplies, with F32 activations as the GPU uses them, so the two
/// differ only in accumulation order. (The CPU runner over the quantized
/// file rounds each activation row to Q8_0/Q8_K first, as llama.cpp does:
/// the GPU does not, so that is the farther reference.)
std::shared_ptr<const Model> dequantized_copy(const Model& model) {
  const GgufFile& file = model.file();
  GgufWriter writer;
  // Every metadata entry but the alignment, which the writer sets itself.
  for (std::string_view key : file.keys())
    if (key != "general.alignment")
      writer.add_raw(key, *file.raw_value(key));
  for (const GgufTensorInfo& tensor : file.tensors()) {
    if (tensor.type == TensorType::F32) {
      const auto* begin = tensor.data;
      writer.add_tensor(tensor.name, tensor.type, tensor.dims,
                        std::vector<std::uint8_t>(begin, begin + tensor.n_elements * 4));
      continue;
    }
    const std::uint64_t cols = tensor.dims[0];
    const std::uint64_t rows = tensor.n_elements / cols;
    const std::uint64_t row_bytes = tensor_row_bytes(tensor.type, cols);
    std::vector<float> values(tensor.n_elements); // [rows, cols]
    for (std::uint64_t r = 0; r < rows; ++r)
      dequantize_row(tensor.type, tensor.data + r * row_bytes, cols, values.data() + r * cols);
    std::vector<std::uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer.add_tensor(tensor.name, TensorType::F32, tensor.dims, std::move(bytes));
  }
  const auto path = std::filesystem::temp_directory_path() /
                    ("caflm-test-dequantized-" + std::to_string(::getpid()) + ".gguf");
  writer.write(path.string());
  auto copy = Model::load(path.string());
  std::filesystem::remove(path); // the mapping stays valid
  return copy;
}

/// A sequence the tests drive by hand: its tokens (prompt and what it is fed
/// later), its block table, and how many of its tokens have KV in the cache.
struct Sequence {
  std::uint64_t id = 0;
  std::uint32_t slot = 0;
  std::vector<TokenId> tokens;
  std::vector<BlockId> blocks;
  std::uint32_t computed = 0;
};

/// Hands out block ids below kKvBlocks, never twice.
class BlockCounter {
 public:
  /// A sequence of `tokens` with fresh blocks for all of them.
  Sequence sequence(std::uint64_t id, std::vector<TokenId> tokens) {
    Sequence s;
    s.id = id;
    s.slot = static_cast<std::uint32_t>(id);
    s.tokens = std::move(tokens);
    add_blocks(s, static_cast<std::uint32_t>(s.tokens.size()));
    return s;
  }

  /// A sequence that shares the first `shared_blocks` whole blocks of
  /// `parent` (a prefix-cache hit: their KV is in the cache already), with
  /// the parent's tokens there, then `tail`, in fresh blocks.
  Sequence sharing(std::uint64_t id, const Sequence& parent, std::uint32_t shared_blocks,
                   const std::vector<TokenId>& tail) {
    REQUIRE(parent.computed >= shared_blocks * kBlockSize);
    Sequence s;
    s.id = id;
    s.slot = static_cast<std::uint32_t>(id);
    s.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + shared_blocks * kBlockSize);
    s.tokens.insert(s.tokens.end(), tail.begin(), tail.end());
    s.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + shared_blocks);
    s.computed = shared_blocks * kBlockSize;
    add_blocks(s, static_cast<std::uint32_t>(s.tokens.size()));
    return s;
  }

  BlockId fresh() {
    REQUIRE(next_ < kKvBlocks);
    return next_++;
  }

 private:
  void add_blocks(Sequence& s, std::uint32_t tokens) {
    while (s.blocks.size() * kBlockSize < tokens)
      s.blocks.push_back(fresh());
  }

  BlockId next_ = 0;
};

/// One step's RaggedBatch, built from (sequence, tokens to compute) pairs.
class StepBuilder {
 public:
  /// Adds the next `count` tokens of `s` as an item.
  StepBuilder& add(Sequence& s, std::uint32_t count) {
    REQUIRE(count > 0);
    REQUIRE(s.computed + count <= s.tokens.size());
    RaggedBatchItem item{};
    item.request_id = s.id;
    item.slot = s.slot;
    item.token_offset = static_cast<std::uint32_t>(tokens_.size());
    item.position = s.computed;
    item.block_table_offset = static_cast<std::uint32_t>(tables_.size());
    item.page_count = (s.computed + count + kBlockSize - 1) / kBlockSize;
    item.query_length = count;
    REQUIRE(item.page_count <= s.blocks.size());
    tokens_.insert(tokens_.end(), s.tokens.begin() + s.computed,
                   s.tokens.begin() + s.computed + count);
    tables_.insert(tables_.end(), s.blocks.begin(), s.blocks.begin() + item.page_count);
    items_.push_back(item);
    members_.push_back(&s);
    return *this;
  }

  StepBuilder& copy(BlockId source, BlockId destination) {
    copies_.push_back(BlockCopy{source, destination});
    return *this;
  }

  RaggedBatch batch() const {
    return RaggedBatch{items_.data(),  static_cast<std::uint32_t>(items_.size()),
                       tokens_.data(), static_cast<std::uint32_t>(tokens_.size()),
                       tables_.data(), static_cast<std::uint32_t>(tables_.size()),
                       copies_.data(), static_cast<std::uint32_t>(copies_.size())};
  }

  const std::vector<RaggedBatchItem>& items() const { return items_; }

  /// After every backend ran the step: the items' tokens are in the cache.
  void commit() {
    for (std::size_t i = 0; i < items_.size(); ++i)
      members_[i]->computed += items_[i].query_length;
  }

 private:
  std::vector<RaggedBatchItem> items_;
  std::vector<Sequence*> members_;
  std::vector<TokenId> tokens_;
  std::vector<BlockId> tables_;
  std::vector<BlockCopy> copies_;
};

/// Runs `batch` with a host logits buffer and checks the outputs; returns
/// the logits. // [item_count, vocab]
std::vector<float> run(RaggedBackend& backend, const RaggedBatch& batch) {
  std::vector<RaggedBatchOutput> outputs(batch.item_count);
  std::vector<float> logits(static_cast<std::size_t>(batch.item_count) * backend.vocab_size(),
                            std::numeric_limits<float>::quiet_NaN());
  auto receipt = backend.execute(batch, outputs.data(), logits.data());
  INFO("execute: " << (receipt ? "ok" : to_string(receipt.error())));
  REQUIRE(receipt);
  CHECK(receipt->tokens == batch.token_count);
  CHECK(receipt->batch_size == batch.item_count);
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    CHECK(outputs[i].request_id == batch.items[i].request_id);
    CHECK(outputs[i].slot == batch.items[i].slot);
    CHECK(outputs[i].tokens_computed == batch.items[i].query_length);
  }
  return logits;
}

/// The largest |gpu - cpu| of row `i`, relative to the row's largest |cpu|.
float relative_row_error(const std::vector<float>& gpu, const std::vector<float>& cpu,
                         std::uint32_t i, std::uint32_t vocab) {
  float diff = 0.0f, scale = 0.0f;
  for (std::uint32_t v = 0; v < vocab; ++v) {
    const std::size_t at = static_cast<std::size_t>(i) * vocab + v;
    if (!std::isfinite(gpu[at]))
      return std::numeric_limits<float>::infinity();
    diff = std::max(diff, std::fabs(gpu[at] - cpu[at]));
    scale = std::max(scale, std::fabs(cpu[at]));
  }
  return diff / std::max(scale, 1e-30f);
}

/// Runs the step on both runners and checks every row; returns the worst
/// relative error.
float compare_step(RaggedBackend& gpu, RaggedBackend& cpu, StepBuilder& step, float tolerance) {
  const RaggedBatch batch = step.batch();
  const std::vector<float> gpu_logits = run(gpu, batch);
  const std::vector<float> cpu_logits = run(cpu, batch);
  step.commit();
  float worst = 0.0f;
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const float error = relative_row_error(gpu_logits, cpu_logits, i, gpu.vocab_size());
    INFO("item " << i << " (request " << batch.items[i].request_id << ", position "
                 << batch.items[i].position << ", " << batch.items[i].query_length
                 << " tokens): relative error " << error);
    CHECK(error <= tolerance);
    worst = std::max(worst, error);
  }
  return worst;
}

/// Drives `gpu` and `cpu` through the same steps and compares the logits of
/// every item: a first step of four prefills; a mixed step of two prefill
/// chunks (one a second chunk, one of a sequence that shares two whole blocks
/// with another, read by both in the step) and three decodes; then prefill
/// in chunks and decodes over many steps.
void compare_runners(RaggedBackend& gpu, RaggedBackend& cpu, std::uint32_t vocab, float tolerance) {
  std::mt19937 rng(23);
  BlockCounter blocks;
  Sequence a = blocks.sequence(0, random_tokens(rng, 40, vocab));
  Sequence c = blocks.sequence(2, random_tokens(rng, 40, vocab));
  Sequence d = blocks.sequence(3, random_tokens(rng, 40, vocab));
  Sequence e = blocks.sequence(4, random_tokens(rng, 40, vocab));

  {
    StepBuilder prefill; // all prefills, each sequence's first
    prefill.add(a, 19).add(c, 9).add(d, 13).add(e, 6);
    compare_step(gpu, cpu, prefill, tolerance);
  }
  Sequence b = blocks.sharing(1, a, 2, random_tokens(rng, 30, vocab));
  {
    StepBuilder mixed;
    mixed
        .add(a, 1)  // decode at 19, reading blocks b shares
        .add(b, 11) // prefill chunk at 8 over a's first two blocks
        .add(d, 1)  // decode
        .add(c, 7)  // second prefill chunk
        .add(e, 1); // decode
    compare_step(gpu, cpu, mixed, tolerance);
  }

  // Fresh sequences: prompts of different lengths prefilled in chunks of
  // different sizes, each decoding once its prompt is in, until the longest
  // is done; the steps mix chunks and decodes as the scheduler's would.
  std::vector<Sequence> fresh;
  const std::uint32_t prompts[] = {33, 5, 21, 12, 48};
  const std::uint32_t chunks[] = {8, 16, 5, 12, 20};
  for (std::uint32_t i = 0; i < 5; ++i)
    fresh.push_back(blocks.sequence(10 + i, random_tokens(rng, prompts[i] + 12, vocab)));
  float worst = 0.0f;
  int steps = 0;
  for (bool more = true; more; ++steps) {
    StepBuilder step;
    more = false;
    for (std::uint32_t i = 0; i < fresh.size(); ++i) {
      Sequence& s = fresh[i];
      if (s.computed == s.tokens.size())
        continue;
      const std::uint32_t count =
          s.computed < prompts[i] ? std::min(chunks[i], prompts[i] - s.computed) : 1u;
      step.add(s, count);
      more = true;
    }
    if (!more)
      break;
    worst = std::max(worst, compare_step(gpu, cpu, step, tolerance));
  }
  CHECK(steps > 12);
  WARN("largest relative error of the logits: " << worst);
}

} // namespace

// -- host-side sizing (no device needed) --------------------------------------

TEST_CASE("decode_graph_bucket is the smallest power of two that holds the step") {
  const std::uint32_t max_tokens = 512;
  CHECK(cuda::decode_graph_bucket(1, max_tokens) == 1);
  CHECK(cuda::decode_graph_bucket(2, max_tokens) == 2);
  CHECK(cuda::decode_graph_bucket(3, max_tokens) == 4);
  CHECK(cuda::decode_graph_bucket(17, max_tokens) == 32);
  CHECK(cuda::decode_graph_bucket(512, max_tokens) == 512);
  for (std::uint32_t tokens = 1; tokens <= max_tokens; ++tokens) {
    const std::uint32_t bucket = cuda::decode_graph_bucket(tokens, max_tokens);
    INFO("tokens " << tokens << ": bucket " << bucket);
    REQUIRE(bucket >= tokens);
    REQUIRE((bucket & (bucket - 1)) == 0);
    REQUIRE(bucket / 2 < tokens); // the smallest such power
  }
  // Past max_tokens the step runs without a graph.
  CHECK(cuda::decode_graph_bucket(513, max_tokens) == 0);
  CHECK(cuda::decode_graph_bucket(1000, max_tokens) == 0);
  CHECK(cuda::decode_graph_bucket(std::numeric_limits<std::uint32_t>::max(), max_tokens) == 0);
  // A budget that is no power of two: steps within the largest power below
  // it get their bucket; beyond the budget none. (Between the two, the
  // header allows the next power or no graph.)
  CHECK(cuda::decode_graph_bucket(64, 100) == 64);
  CHECK(cuda::decode_graph_bucket(33, 100) == 64);
  const std::uint32_t between = cuda::decode_graph_bucket(65, 100);
  CHECK((between == 0 || between == 128));
  CHECK(cuda::decode_graph_bucket(101, 100) == 0);
}

TEST_CASE("cuda_workspace_bytes grows with the step's limits and the vocabulary") {
  auto model = caflm::testing::random_model(gpu_spec("llama", 64));
  const ModelConfig& small = model->config();
  CudaRunnerOptions options = gpu_options();
  const std::uint64_t base = cuda::cuda_workspace_bytes(small, options);
  // At least the activations of max_tokens and the logits of max_items.
  CHECK(base >= std::uint64_t{options.max_tokens} * small.dim * sizeof(float));
  CHECK(base >= std::uint64_t{options.max_items} * small.vocab_size * sizeof(float));

  CudaRunnerOptions more_tokens = options;
  more_tokens.max_tokens *= 4;
  CHECK(cuda::cuda_workspace_bytes(small, more_tokens) > base);
  CudaRunnerOptions more_items = options;
  more_items.max_items *= 4;
  CHECK(cuda::cuda_workspace_bytes(small, more_items) > base);
  ModelConfig wider_vocab = small;
  wider_vocab.vocab_size *= 4;
  CHECK(cuda::cuda_workspace_bytes(wider_vocab, options) > base);

  // A 70B-class model with a large vocabulary and step: the byte counts pass
  // 2^32 many times over and must not wrap.
  ModelConfig big = small;
  big.dim = 8192;
  big.n_layers = 80;
  big.n_heads = 64;
  big.n_kv_heads = 8;
  big.head_dim = 128;
  big.ffn_dim = 28672;
  big.vocab_size = 152064;
  big.context_length = 131072;
  CudaRunnerOptions big_options = options;
  big_options.max_tokens = 65536;
  big_options.max_items = 4096;
  big_options.max_context = 131072;
  const std::uint64_t big_bytes = cuda::cuda_workspace_bytes(big, big_options);
  const std::uint64_t activations = std::uint64_t{65536} * 28672 * sizeof(float);
  const std::uint64_t logits = std::uint64_t{4096} * 152064 * sizeof(float);
  CHECK(activations > (std::uint64_t{1} << 32));
  CHECK(big_bytes >= activations);
  CHECK(big_bytes >= logits);
  CHECK(big_bytes > cuda::cuda_workspace_bytes(small, options));
}

// -- logits against the CPU runner --------------------------------------------

TEST_CASE("F32 models: the GPU's logits match the CPU runner's in mixed and chunked steps") {
  CAFLM_REQUIRE_GPU();
  // Both runners compute every product of the same F32 weights and
  // activations in F32; only the order of the sums differs (the GPU reduces
  // K across a warp's lanes, attention over tiles), so each logit differs by
  // a few ulp of the sums it came from: far below 1e-3 of the row's largest.
  auto [arch, head_dim] = GENERATE(table<std::string, std::uint32_t>({
      {"llama", 64},
      {"llama", 128},
      {"qwen2", 64}, // q, k, v biases
      {"qwen2", 128},
      {"qwen3", 128}, // per-head q and k norms
      {"qwen3", 64},
      {"phi3", 64}, // fused qkv and gate/up, NeoX RoPE
      {"phi3", 128},
  }));
  INFO(arch << ", head_dim " << head_dim);
  auto model = caflm::testing::random_model(gpu_spec(arch, head_dim));
  REQUIRE(model->config().head_dim == head_dim);
  auto gpu = make_gpu_runner(model);
  CpuModelRunner cpu(model, cpu_limits());
  compare_runners(*gpu, cpu, model->config().vocab_size, 1e-3f);
}

TEST_CASE("phi3 with LongRoPE factors: the GPU's logits match the CPU runner's") {
  CAFLM_REQUIRE_GPU();
  // The runners' context (kMaxContext) exceeds the original one: both use
  // rope_factors_long and the attention factor. Same tolerance as above.
  RandomModelSpec spec = gpu_spec("phi3", 64);
  spec.rope_scaling = RandomRopeScaling::LongRope;
  spec.original_context_length = 64;
  auto model = caflm::testing::random_model(spec);
  auto gpu = make_gpu_runner(model);
  CpuModelRunner cpu(model, cpu_limits());
  compare_runners(*gpu, cpu, model->config().vocab_size, 1e-3f);
}

TEST_CASE("quantized models: the GPU's logits match the CPU runner over the same values in F32") {
  CAFLM_REQUIRE_GPU();
  // The reference is the CPU runner over the model with every matrix decoded
  // to F32 (dequantized_copy): the GPU decodes exactly those bytes to the
  // same values and multiplies them with unrounded F32 activations, as the
  // CPU does over an F32 file. What is left is the order of the sums, as for
  // F32 models, and at most the last bit of a decoded value where the kernel
  // groups a block's scale products differently from dequantize_row: twice
  // the F32 tolerance. (On the CPU, the F32 runner over such a copy differs
  // from the double-precision reference pass by 2e-7 of the row's largest
  // logit, while the CPU runner over the quantized file itself, which rounds
  // activations to Q8_0/Q8_K, lands 1.9% to 2.6% away from the copy on these
  // five models: not a reference for the GPU at any useful tolerance.)
  auto [arch, head_dim, type, mix] =
      GENERATE(table<std::string, std::uint32_t, TensorType, QuantMix>({
          {"llama", 64, TensorType::Q8_0, QuantMix::Uniform},
          {"qwen2", 128, TensorType::Q4_K, QuantMix::Uniform},
          {"qwen3", 128, TensorType::Q6_K, QuantMix::Uniform},
          {"llama", 128, TensorType::Q4_K, QuantMix::Q4_K_M}, // Q4_K with Q6_K rows
          {"phi3", 64, TensorType::Q4_K, QuantMix::Q4_K_M},
      }));
  INFO(arch << ", head_dim " << head_dim << ", " << to_string(type) << " " << to_string(mix));
  auto model = caflm::testing::random_model(gpu_spec(arch, head_dim, type, mix));
  auto reference = dequantized_copy(*model);
  auto gpu = make_gpu_runner(model);
  CpuModelRunner cpu(reference, cpu_limits());
  compare_runners(*gpu, cpu, model->config().vocab_size, 2e-3f);
}

// -- engines over the runner ----------------------------------------------------

TEST_CASE("the tiny reference model through make_cuda_engine greedily generates llama.cpp's "
          "tokens") {
  CAFLM_REQUIRE_GPU();
  const std::string testdata = path_from_env("CAFLM_TESTDATA_DIR", CAFLM_TESTDATA_DIR);
  auto model = Model::load(testdata + "/models/tiny-llama-f32.gguf");
  std::ifstream in(testdata + "/models/tiny-llama-f32.expected.json");
  REQUIRE(in.good());
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  REQUIRE(cases.size() > 0);
  EngineOptions options;
  options.device = Device::Cuda;
  options.gpu_memory.fraction = 0.0; // bytes instead
  options.gpu_memory.bytes = std::uint64_t{2} << 30;
  auto engine = make_cuda_engine(model, load_tokenizer(*model), options);
  // All cases in one engine, as on the CPU: batching must not change them.
  std::uint64_t id = 0;
  for (const auto& c : cases) {
    GenerationRequest request;
    request.id = id++;
    request.prompt = c["prompt_tokens"].get<std::vector<TokenId>>();
    request.params.temperature = 0.0f;
    request.params.ignore_eos = true;
    request.params.max_tokens = static_cast<std::uint32_t>(c["greedy_tokens"].size());
    request.params.top_logprobs = 5;
    REQUIRE_FALSE(engine->add(request));
  }
  std::vector<std::vector<TokenEvent>> streams(cases.size());
  while (engine->has_work())
    for (auto& event : engine->step())
      streams[event.request_id].push_back(std::move(event));

  // The rule of testdata/README.md: equal tokens, top-5 log-probabilities
  // within 1e-3; a different token only at a near-tie, where comparing stops.
  int compared_steps = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    INFO("case " << i << ": " << c["prompt"].get<std::string>());
    const auto& stream = streams[i];
    REQUIRE(stream.size() == c["greedy_tokens"].size());
    CHECK(stream.back().finish == FinishReason::Length);
    for (std::size_t step = 0; step < stream.size(); ++step) {
      const auto& reference = c["top5_logprobs"][step];
      const TokenId expected = c["greedy_tokens"][step];
      if (stream[step].token != expected) {
        const double margin = reference[0][1].get<double>() - reference[1][1].get<double>();
        INFO("step " << step << ": got " << stream[step].token << ", expected " << expected);
        CHECK(margin < 0.02);
        break;
      }
      REQUIRE(stream[step].top_logprobs.size() == 5);
      for (std::size_t k = 0; k < 5; ++k) {
        INFO("step " << step << " rank " << k);
        CHECK(stream[step].top_logprobs[k].token == reference[k][0].get<TokenId>());
        CHECK(std::abs(stream[step].top_logprobs[k].logprob - reference[k][1].get<double>()) <
              1e-3);
      }
      ++compared_steps;
    }
  }
  CHECK(compared_steps > 100);
}

TEST_CASE("make_cuda_engine and make_cpu_engine generate the same greedy tokens") {
  CAFLM_REQUIRE_GPU();
  auto model = caflm::testing::random_model(gpu_spec("qwen2", 64));
  auto tokenizer = load_tokenizer(*model);
  EngineOptions options;
  options.kv_cache_bytes = std::size_t{64} << 20;
  options.max_context = kMaxContext;
  options.gpu_memory.fraction = 0.0; // bytes instead
  options.gpu_memory.bytes = std::uint64_t{2} << 30;
  options.device = Device::Cuda;
  auto gpu = make_cuda_engine(model, tokenizer, options);
  options.device = Device::Cpu;
  auto cpu = make_cpu_engine(model, tokenizer, cpu_engine_config(*model, options));

  constexpr std::uint32_t kTokens = 32;
  const std::uint32_t vocab = model->config().vocab_size;
  auto generate = [&](InferenceEngine& engine) {
    std::mt19937 prompts(41);
    for (std::uint64_t id = 0; id < 6; ++id) {
      GenerationRequest request;
      request.id = id;
      request.prompt = random_tokens(prompts, 3 + 11 * id, vocab);
      request.params.temperature = 0.0f;
      request.params.ignore_eos = true;
      request.params.max_tokens = kTokens;
      request.params.top_logprobs = 2;
      REQUIRE_FALSE(engine.add(request));
    }
    std::vector<std::vector<TokenEvent>> streams(6);
    while (engine.has_work())
      for (auto& event : engine.step())
        streams[event.request_id].push_back(std::move(event));
    return streams;
  };
  const auto on_gpu = generate(*gpu);
  const auto on_cpu = generate(*cpu);
  int compared = 0;
  for (std::size_t id = 0; id < on_cpu.size(); ++id) {
    INFO("request " << id);
    REQUIRE(on_gpu[id].size() == kTokens);
    REQUIRE(on_cpu[id].size() == kTokens);
    for (std::size_t step = 0; step < kTokens; ++step) {
      const TokenEvent& g = on_gpu[id][step];
      const TokenEvent& c = on_cpu[id][step];
      INFO("step " << step);
      if (g.token != c.token) {
        // Logits 1e-5 apart can order a near-tie differently; nothing else.
        REQUIRE(c.top_logprobs.size() == 2);
        CHECK(c.top_logprobs[0].logprob - c.top_logprobs[1].logprob < 1e-3f);
        break;
      }
      CHECK(std::fabs(g.logprob - c.logprob) < 1e-3f);
      ++compared;
    }
  }
  CHECK(compared > 150);
}

namespace {

/// An engine over a CUDA runner of `kv_blocks` blocks of 16 tokens.
std::unique_ptr<InferenceEngine> engine_over_runner(std::shared_ptr<const Model> model,
                                                    std::uint32_t kv_blocks) {
  EngineConfig config;
  config.scheduler.max_requests = 8;
  config.scheduler.max_running = 8;
  config.scheduler.max_context = 128;
  config.scheduler.block_size = 16;
  config.scheduler.token_budget = 64;
  config.kv_blocks = kv_blocks;
  config.prefix_caching = true;
  CudaRunnerOptions options = gpu_options(true, kv_blocks);
  options.block_size = 16;
  options.max_tokens = 64;
  options.max_items = 8;
  options.max_context = 128;
  auto runner = std::make_unique<CudaModelRunner>(model, options);
  REQUIRE(runner->kv_blocks() >= kv_blocks);
  return std::make_unique<InferenceEngine>(load_tokenizer(*model), std::move(runner), config,
                                           model->cache_salt());
}

} // namespace

TEST_CASE("preemption and recompute on the GPU give the tokens of an unpressed run") {
  CAFLM_REQUIRE_GPU();
  auto model = caflm::testing::random_model(gpu_spec("llama", 64));
  const std::uint32_t vocab = model->config().vocab_size;
  // Greedy and seeded nucleus requests: a recomputed sequence's logits are
  // bitwise its first ones (batch invariance, prefill vs. decode), and the
  // draws depend only on (seed, step), so every token must be the same.
  auto generate = [&](InferenceEngine& engine, long& preemptions) {
    std::mt19937 rng(9);
    for (std::uint64_t id = 0; id < 6; ++id) {
      GenerationRequest request;
      request.id = id;
      request.prompt = random_tokens(rng, 20 + 3 * id, vocab);
      request.params.max_tokens = 48;
      request.params.ignore_eos = true;
      if (id % 2 == 0) {
        request.params.temperature = 0.0f;
      } else {
        request.params.temperature = 0.9f;
        request.params.top_p = 0.9f;
        request.params.seed = 500 + id;
      }
      REQUIRE_FALSE(engine.add(request));
    }
    std::vector<std::vector<TokenId>> tokens(6);
    while (engine.has_work()) {
      for (const TokenEvent& event : engine.step()) {
        INFO("request " << event.request_id << ": " << event.error);
        REQUIRE(event.finish != FinishReason::Error);
        tokens[event.request_id].push_back(event.token); // the last one carries the finish
      }
      preemptions += static_cast<long>(engine.last_preempted().size());
    }
    return tokens;
  };
  long roomy_preemptions = 0, tight_preemptions = 0;
  auto roomy = engine_over_runner(model, 256);
  // Each request ends at 4 to 5 blocks of 16 tokens; 10 blocks hold two.
  auto tight = engine_over_runner(model, 10);
  const auto expected = generate(*roomy, roomy_preemptions);
  const auto pressed = generate(*tight, tight_preemptions);
  CHECK(roomy_preemptions == 0);
  CHECK(tight_preemptions > 0);
  for (std::size_t id = 0; id < expected.size(); ++id) {
    INFO("request " << id);
    CHECK(expected[id].size() == 48);
    CHECK(pressed[id] == expected[id]);
  }
}

// -- batch invariance on the device -------------------------------------------

namespace {

constexpr std::uint32_t kSubjectLength = 40;

/// How one run of the subject sequence is set up.
struct SubjectRun {
  /// Tokens of the subject's first step (one prefill chunk).
  std::uint32_t prompt = 25;
  /// Other sequences in every step: prefilled beside the subject's prompt,
  /// then decoding beside its decodes.
  std::uint32_t companions = 0;
  /// The subject's item index in each step (at most the last).
  std::uint32_t subject_index = 0;
  bool cuda_graphs = true;
  bool programmatic_launch = false;
};

/// The subject's logits by position (of the last token of each item it
/// had), run on a fresh runner as `setup` says.
std::map<std::uint32_t, std::vector<float>> subject_logits(std::shared_ptr<const Model> model,
                                                           const std::vector<TokenId>& subject,
                                                           const SubjectRun& setup,
                                                           cuda::CudaRunnerStats* stats = nullptr) {
  auto runner = make_gpu_runner(model, setup.cuda_graphs, setup.programmatic_launch);
  const std::uint32_t vocab = runner->vocab_size();
  BlockCounter blocks;
  std::mt19937 rng(100 + setup.companions);
  std::vector<Sequence> companions;
  for (std::uint32_t c = 0; c < setup.companions; ++c)
    companions.push_back(blocks.sequence(1 + c, random_tokens(rng, kSubjectLength + 8, vocab)));
  Sequence s = blocks.sequence(0, subject);
  std::map<std::uint32_t, std::vector<float>> rows;
  for (bool first = true; s.computed < kSubjectLength; first = false) {
    StepBuilder step;
    const std::uint32_t items = setup.companions + 1;
    const std::uint32_t subject_at = std::min(setup.subject_index, items - 1);
    std::uint32_t added = 0;
    for (std::uint32_t i = 0; i < items; ++i) {
      if (i == subject_at) {
        step.add(s, first ? setup.prompt : 1);
        continue;
      }
      Sequence& c = companions[added++];
      step.add(c, first ? 1 + static_cast<std::uint32_t>(c.id * 3) % 5 : 1);
    }
    const std::vector<float> logits = run(*runner, step.batch());
    const RaggedBatchItem& item = step.items()[subject_at];
    REQUIRE(item.request_id == 0);
    const float* row = logits.data() + static_cast<std::size_t>(subject_at) * vocab;
    rows[item.position + item.query_length - 1] = std::vector<float>(row, row + vocab);
    step.commit();
  }
  if (stats != nullptr)
    *stats = runner->stats();
  return rows;
}

/// True when both runs have rows for the same positions from `from` on and
/// those rows are bitwise equal.
bool bitwise_equal(const std::map<std::uint32_t, std::vector<float>>& expected,
                   const std::map<std::uint32_t, std::vector<float>>& actual,
                   std::uint32_t from = 0) {
  std::size_t compared = 0;
  for (const auto& [position, row] : expected) {
    if (position < from)
      continue;
    auto it = actual.find(position);
    if (it == actual.end() || it->second.size() != row.size())
      return false;
    if (std::memcmp(it->second.data(), row.data(), row.size() * sizeof(float)) != 0) {
      UNSCOPED_INFO("position " << position << " differs");
      return false;
    }
    ++compared;
  }
  return compared > 0;
}

} // namespace

TEST_CASE("a sequence's logits on the GPU are bitwise the same whatever shares its step") {
  CAFLM_REQUIRE_GPU();
  auto [arch, head_dim, type, mix] =
      GENERATE(table<std::string, std::uint32_t, TensorType, QuantMix>({
          {"llama", 64, TensorType::F32, QuantMix::Uniform},
          {"qwen3", 128, TensorType::Q8_0, QuantMix::Uniform},
          {"phi3", 64, TensorType::Q4_K, QuantMix::Q4_K_M},
      }));
  INFO(arch << ", head_dim " << head_dim << ", " << to_string(type) << " " << to_string(mix));
  auto model = caflm::testing::random_model(gpu_spec(arch, head_dim, type, mix));
  std::mt19937 rng(3);
  const auto subject = random_tokens(rng, kSubjectLength, model->config().vocab_size);

  cuda::CudaRunnerStats graph_stats;
  const auto alone = subject_logits(model, subject, SubjectRun{}, &graph_stats);
  REQUIRE(alone.size() == kSubjectLength - 25 + 1);
  // Decode steps of one item ran from captured graphs.
  CHECK(graph_stats.graphs_captured > 0);
  CHECK(graph_stats.graph_replays > 0);

  SECTION("without CUDA graphs") {
    cuda::CudaRunnerStats stats;
    SubjectRun setup;
    setup.cuda_graphs = false;
    CHECK(bitwise_equal(alone, subject_logits(model, subject, setup, &stats)));
    CHECK(stats.graphs_captured == 0);
    CHECK(stats.graph_replays == 0);
  }
  SECTION("with programmatic launches, where a kernel may start before the one before it ends") {
    SubjectRun setup;
    setup.programmatic_launch = true;
    CHECK(bitwise_equal(alone, subject_logits(model, subject, setup)));
    setup.cuda_graphs = false;
    CHECK(bitwise_equal(alone, subject_logits(model, subject, setup)));
    setup.companions = 16;
    setup.subject_index = 7;
    const auto overlapped = subject_logits(model, subject, setup);
    setup.programmatic_launch = false;
    CHECK(bitwise_equal(subject_logits(model, subject, setup), overlapped));
  }
  SECTION("with other sequences, first, in the middle and last; decode buckets 1, 4 and 32") {
    // Decode steps of 3 and 17 items land in the graph buckets 4 and 32,
    // padded beyond the items present.
    const std::uint32_t placements[][2] = {{2, 0}, {2, 2}, {16, 0}, {16, 7}, {16, 16}};
    for (const auto& placement : placements) {
      INFO(placement[0] << " companions, subject at item " << placement[1]);
      SubjectRun setup;
      setup.companions = placement[0];
      setup.subject_index = placement[1];
      cuda::CudaRunnerStats stats;
      CHECK(bitwise_equal(alone, subject_logits(model, subject, setup, &stats)));
      CHECK(stats.graph_replays > 0);
      setup.cuda_graphs = false;
      CHECK(bitwise_equal(alone, subject_logits(model, subject, setup)));
    }
  }
  SECTION("a position computed as the last token of a prefill chunk or as a decode") {
    // Prompt of 30: position 29 ends a chunk here and is a decode alone, and
    // the later decodes read KV the chunk wrote.
    SubjectRun setup;
    setup.prompt = 30;
    const auto chunked = subject_logits(model, subject, setup);
    CHECK(chunked.count(29) == 1);
    CHECK(bitwise_equal(chunked, alone));
    setup.prompt = 1; // the whole sequence decoded one token per step
    const auto decoded = subject_logits(model, subject, setup);
    CHECK(bitwise_equal(alone, decoded, 24));
  }
}

// -- copy-on-write ---------------------------------------------------------------

TEST_CASE("block copies run before the step writes, as on the CPU") {
  CAFLM_REQUIRE_GPU();
  auto model = caflm::testing::random_model(gpu_spec("qwen2", 64));
  const std::uint32_t vocab = model->config().vocab_size;
  auto gpu = make_gpu_runner(model);
  CpuModelRunner cpu(model, cpu_limits());
  std::mt19937 rng(77);
  BlockCounter blocks;
  // The parent holds 10 tokens: blocks 0 and 1 full, block 2 half.
  Sequence parent = blocks.sequence(0, random_tokens(rng, 16, vocab));
  {
    StepBuilder prefill;
    prefill.add(parent, 10);
    compare_step(*gpu, cpu, prefill, 1e-3f);
  }
  // Fork: the child shares the full blocks and gets a copy of the half one;
  // in the same step both write position 10, into their own third block. A
  // copy made after the writes would give the child the parent's KV there.
  Sequence child;
  child.id = 1;
  child.slot = 1;
  child.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + 10);
  const auto tail = random_tokens(rng, 6, vocab);
  child.tokens.insert(child.tokens.end(), tail.begin(), tail.end());
  child.blocks = {parent.blocks[0], parent.blocks[1], blocks.fresh()};
  while (child.blocks.size() * kBlockSize < child.tokens.size())
    child.blocks.push_back(blocks.fresh());
  child.computed = 10;
  REQUIRE(child.tokens[10] != parent.tokens[10]);
  std::vector<std::vector<float>> forked_rows;
  for (int step_index = 0; step_index < 4; ++step_index) {
    StepBuilder step;
    if (step_index == 0)
      step.copy(parent.blocks[2], child.blocks[2]);
    step.add(parent, 1).add(child, 1);
    const RaggedBatch batch = step.batch();
    const std::vector<float> gpu_logits = run(*gpu, batch);
    const std::vector<float> cpu_logits = run(cpu, batch);
    step.commit();
    for (std::uint32_t i = 0; i < 2; ++i)
      CHECK(relative_row_error(gpu_logits, cpu_logits, i, vocab) <= 1e-3f);
    forked_rows.emplace_back(gpu_logits.begin() + vocab, gpu_logits.begin() + 2 * vocab);
  }

  // The child computed on its own from scratch: its prefix entered by a
  // prefill, not by a copy, and batch invariance makes the rows bitwise the
  // same as the forked child's.
  auto alone = make_gpu_runner(model);
  BlockCounter other_blocks;
  Sequence solo = other_blocks.sequence(1, child.tokens);
  {
    StepBuilder prefill;
    prefill.add(solo, 11);
    const std::vector<float> logits = run(*alone, prefill.batch());
    prefill.commit();
    CHECK(std::memcmp(logits.data(), forked_rows[0].data(), vocab * sizeof(float)) == 0);
  }
  for (std::size_t i = 1; i < forked_rows.size(); ++i) {
    StepBuilder decode;
    decode.add(solo, 1);
    const std::vector<float> logits = run(*alone, decode.batch());
    decode.commit();
    INFO("decode " << i);
    CHECK(std::memcmp(logits.data(), forked_rows[i].data(), vocab * sizeof(float)) == 0);
  }
}

// -- sampling on the device ------------------------------------------------------

namespace {

/// One row's sampling, as the host Sampler takes it and as a spec carries it.
struct SamplingCase {
  SamplingParams params;
  std::vector<TokenId> history; // the whole penalty window
  std::vector<TokenId> banned;
};

} // namespace

TEST_CASE("sampling on the device chooses what the host Sampler chooses from the same logits") {
  CAFLM_REQUIRE_GPU();
  auto model = caflm::testing::random_model(gpu_spec("llama", 64));
  const std::uint32_t vocab = model->config().vocab_size;
  // Two runners in lockstep: one hands its logits to the host, the other
  // keeps them on the device (null logits) and samples them there. Their
  // logits are bitwise the same (one deterministic computation).
  auto with_logits = make_gpu_runner(model);
  auto on_device = make_gpu_runner(model);
  std::mt19937 rng(5);
  BlockCounter blocks;
  std::vector<Sequence> sequences;
  for (std::uint64_t id = 0; id < 5; ++id)
    sequences.push_back(blocks.sequence(id, random_tokens(rng, 48, vocab)));

  std::vector<SamplingCase> cases(5);
  cases[0].params.temperature = 0.0f; // greedy
  cases[0].params.top_logprobs = 5;
  cases[1].params.temperature = 0.8f; // seeded nucleus
  cases[1].params.top_p = 0.9f;
  cases[1].params.seed = 1234;
  cases[1].params.top_logprobs = 3;
  cases[2].params.temperature = 1.0f; // every filter and penalty
  cases[2].params.top_k = 40;
  cases[2].params.top_p = 0.95f;
  cases[2].params.min_p = 0.02f;
  cases[2].params.repetition_penalty = 1.3f;
  cases[2].params.presence_penalty = 0.4f;
  cases[2].params.frequency_penalty = 0.2f;
  cases[2].params.seed = 99;
  cases[2].params.top_logprobs = kMaxSampleTopLogprobs;
  cases[3].params.temperature = 0.0f; // greedy with penalties
  cases[3].params.repetition_penalty = 1.5f;
  cases[3].params.frequency_penalty = 0.5f;
  cases[4].params.temperature = 1.5f; // hot, with top-k only
  cases[4].params.top_k = 5;
  cases[4].params.seed = 7;
  for (SamplingCase& c : cases) {
    c.params.penalty_last_n = -1; // the history is the window
    c.params.logprobs = true;     // the host's logprob, compared with the device's
    c.banned = {TokenId(1)};
  }

  Sampler sampler(vocab);
  int draws = 0;
  for (std::uint32_t step_index = 0; step_index < 12; ++step_index) {
    StepBuilder step;
    for (Sequence& s : sequences)
      step.add(s, step_index == 0 ? 6 + static_cast<std::uint32_t>(s.id) : 1);
    const RaggedBatch batch = step.batch();
    const std::vector<float> logits = run(*with_logits, batch);
    std::vector<RaggedBatchOutput> outputs(batch.item_count);
    REQUIRE(on_device->execute(batch, outputs.data(), nullptr));
    step.commit();

    // The specs, with penalty windows drawn from the sequences' tokens (a
    // repeated token counts each time) and, for case 3, the row's argmax
    // banned so the ban decides.
    std::vector<RaggedSampleSpec> specs;
    std::vector<TokenId> penalty_tokens, banned;
    std::vector<std::uint32_t> penalty_counts;
    for (std::uint32_t i = 0; i < cases.size(); ++i) {
      SamplingCase& c = cases[i];
      const Sequence& s = sequences[i];
      c.history.assign(s.tokens.begin(), s.tokens.begin() + s.computed);
      c.history.push_back(s.tokens[s.computed % 3]); // a repeat
      if (i == 3) {
        const float* row = logits.data() + static_cast<std::size_t>(i) * vocab;
        c.banned = {static_cast<TokenId>(std::max_element(row, row + vocab) - row)};
      }
      RaggedSampleSpec spec{};
      spec.item = i;
      spec.temperature = c.params.temperature;
      spec.top_k = c.params.top_k;
      spec.top_p = c.params.top_p;
      spec.min_p = c.params.min_p;
      spec.repetition_penalty = c.params.repetition_penalty;
      spec.presence_penalty = c.params.presence_penalty;
      spec.frequency_penalty = c.params.frequency_penalty;
      spec.uniform = counter_uniform(c.params.seed.value_or(0), step_index);
      spec.top_logprobs = c.params.top_logprobs;
      std::map<TokenId, std::uint32_t> counts;
      for (TokenId t : c.history)
        ++counts[t];
      spec.penalty_offset = static_cast<std::uint32_t>(penalty_tokens.size());
      spec.penalty_count = static_cast<std::uint32_t>(counts.size());
      for (const auto& [token, count] : counts) {
        penalty_tokens.push_back(token);
        penalty_counts.push_back(count);
      }
      spec.banned_offset = static_cast<std::uint32_t>(banned.size());
      spec.banned_count = static_cast<std::uint32_t>(c.banned.size());
      banned.insert(banned.end(), c.banned.begin(), c.banned.end());
      specs.push_back(spec);
    }
    const RaggedSampleBatch sample_batch{specs.data(),
                                         static_cast<std::uint32_t>(specs.size()),
                                         penalty_tokens.data(),
                                         penalty_counts.data(),
                                         static_cast<std::uint32_t>(penalty_tokens.size()),
                                         banned.data(),
                                         static_cast<std::uint32_t>(banned.size())};
    std::vector<RaggedSampleResult> results(specs.size());
    std::vector<RaggedTopLogprob> tops(specs.size() * kMaxSampleTopLogprobs);
    auto sampled = on_device->sample(sample_batch, results.data(), tops.data());
    INFO("sample: " << (sampled ? "ok" : to_string(sampled.error())));
    REQUIRE(sampled);

    for (std::uint32_t i = 0; i < cases.size(); ++i) {
      const SamplingCase& c = cases[i];
      std::vector<TokenLogprob> expected_tops(kMaxTopLogprobs);
      const SampleResult expected = sampler.sample(
          logits.data() + static_cast<std::size_t>(i) * vocab, c.params, c.history.data(),
          c.history.size(), step_index, c.banned.data(), c.banned.size(), expected_tops.data());
      INFO("step " << step_index << ", case " << i);
      // Logits, penalties and the uniform are the same numbers; a token can
      // only differ where a cumulative sum lands within rounding of the
      // draw's threshold, which these draws do not.
      CHECK(results[i].token == expected.token);
      // Log-softmax over the same row, summed in another order.
      CHECK(std::fabs(results[i].logprob - expected.logprob) < 1e-4f);
      CHECK(results[i].nan_logits == 0);
      for (std::uint32_t b = 0; b < c.banned.size(); ++b)
        CHECK(results[i].token != c.banned[b]);
      const std::uint32_t wanted = std::min(c.params.top_logprobs, vocab);
      REQUIRE(results[i].top_count == wanted);
      for (std::uint32_t k = 0; k < wanted; ++k) {
        const RaggedTopLogprob& top = tops[i * kMaxSampleTopLogprobs + k];
        INFO("rank " << k);
        CHECK(top.token == expected_tops[k].token);
        CHECK(std::fabs(top.logprob - expected_tops[k].logprob) < 1e-4f);
      }
      ++draws;
    }
  }
  CHECK(draws == 60);
}
