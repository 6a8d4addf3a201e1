#include "caflm/cuda/cuda_model_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "caflm/cuda/block_table_upload.hpp"
#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/device_buffer.hpp"
#include "caflm/cuda/device_sampler.cuh"
#include "caflm/cuda/elementwise_kernels.cuh"
#include "caflm/cuda/gemm_kernels.cuh"
#include "caflm/cuda/paged_attention.cuh"
#include "caflm/cuda/programmatic_launch.cuh"
#include "caflm/cuda/weight_upload.hpp"
#include "caflm/model/model_weights.hpp"

namespace caflm::cuda {

namespace {

/// The largest decode-graph bucket: buckets are 1, 2, 4, ... 512 tokens.
constexpr std::uint32_t kLargestGraphBucket = 512;

/// Distinct penalty-window tokens and banned tokens (end-of-generation
/// tokens under ignore_eos) one sample call holds per row on average; a
/// caller with more splits its rows over several calls (sample_capacity).
constexpr std::uint64_t kPenaltyEntriesPerRow = 256;
constexpr std::uint64_t kBannedPerRow = 16;
/// What one sample call holds at least, so that any single row fits: a
/// window of the whole context, and more end-of-generation tokens than a
/// vocabulary has.
constexpr std::uint64_t kMinBanned = 1024;

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw std::invalid_argument("cuda_workspace_bytes: the workspace size overflows 64 bits");
  return product;
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw std::invalid_argument("cuda_workspace_bytes: the workspace size overflows 64 bits");
  return sum;
}

/// 32-bit words of the step's staging buffer: tokens, the rows whose logits
/// are needed, then the packed step (RaggedStepPacker).
struct StagingLayout {
  std::size_t tokens = 0;    // [max_tokens]
  std::size_t last_rows = 0; // [max_rows]
  std::size_t packed = 0;    // [packer capacity]
  std::size_t total = 0;
};

StagingLayout staging_layout(std::uint32_t max_tokens, std::uint32_t max_rows,
                             std::size_t packed_words) {
  StagingLayout layout;
  layout.tokens = 0;
  layout.last_rows = max_tokens;
  layout.packed = layout.last_rows + max_rows;
  layout.total = layout.packed + packed_words;
  return layout;
}

/// Block-table entries a step may carry: every item's pages at full context.
std::uint64_t max_table_entries(const CudaRunnerOptions& o) {
  return std::uint64_t{o.max_items} * ((std::uint64_t{o.max_context} + o.block_size - 1) /
                                       std::max<std::uint32_t>(o.block_size, 1));
}

/// Rows of logits a step may produce: its items (a padded decode bucket is
/// never larger).
std::uint32_t max_logit_rows(const CudaRunnerOptions& o) {
  return o.max_items;
}

RaggedSampleCapacity sample_capacity_of(const CudaRunnerOptions& o) {
  RaggedSampleCapacity c;
  c.max_specs = o.max_items;
  c.max_penalty_entries = static_cast<std::uint32_t>(std::min<std::uint64_t>(
      std::max<std::uint64_t>(o.max_context, kPenaltyEntriesPerRow * o.max_items),
      std::numeric_limits<std::uint32_t>::max()));
  c.max_banned = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(std::max<std::uint64_t>(kMinBanned, kBannedPerRow * o.max_items),
                              std::numeric_limits<std::uint32_t>::max()));
  return c;
}

void check_options(const CudaRunnerOptions& o) {
  if (o.max_tokens == 0 || o.max_items == 0 || o.max_context == 0 || o.block_size == 0)
    throw std::invalid_argument(
        "CudaModelRunner: max_tokens, max_items, max_context and block_size must be positive");
}

/// Page-locked host memory, so the step's uploads and downloads are
/// asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::uint64_t bytes) {
    CAFLM_CUDA_CHECK(cudaMallocHost(&data_, std::max<std::uint64_t>(bytes, 1)));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept { std::swap(data_, other.data_); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~PinnedBuffer() {
    if (data_ != nullptr)
      cudaFreeHost(data_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

/// A layer's weights in the device arena.
struct DeviceLayer {
  const float* attn_norm = nullptr; // [dim]
  WeightView wq, wk, wv, wo;
  const float* bq = nullptr;       // [q_dim] or null
  const float* bk = nullptr;       // [kv_dim] or null
  const float* bv = nullptr;       // [kv_dim] or null
  const float* bo = nullptr;       // [dim] or null
  const float* q_norm = nullptr;   // [head_dim] or null
  const float* k_norm = nullptr;   // [head_dim] or null
  const float* ffn_norm = nullptr; // [dim]
  WeightView w_gate, w_up, w_down;
  const float* b_gate = nullptr; // [ffn_dim] or null
  const float* b_up = nullptr;   // [ffn_dim] or null
  const float* b_down = nullptr; // [dim] or null
};

} // namespace

std::uint32_t decode_graph_bucket(std::uint32_t tokens, std::uint32_t max_tokens) {
  if (tokens == 0)
    return 0;
  std::uint32_t bucket = 1;
  while (bucket < tokens && bucket <= kLargestGraphBucket / 2)
    bucket *= 2;
  if (bucket < tokens || bucket > max_tokens)
    return 0;
  return bucket;
}

std::uint64_t cuda_workspace_bytes(const ModelConfig& c, const CudaRunnerOptions& o) {
  check_options(o);
  const std::uint64_t f = sizeof(float);
  // Per token: x, h, q, attn, k, v, gate, up.
  std::uint64_t per_token = 2ull * c.dim;
  per_token = checked_add(per_token, checked_mul(2, c.q_dim()));
  per_token = checked_add(per_token, checked_mul(2, c.kv_dim()));
  per_token = checked_add(per_token, checked_mul(2, c.ffn_dim));
  std::uint64_t bytes = checked_mul(checked_mul(per_token, o.max_tokens), f);
  // Per logits row: the gathered last hidden state and the logits.
  const std::uint64_t rows = max_logit_rows(o);
  bytes = checked_add(bytes, checked_mul(checked_mul(rows, checked_add(c.dim, c.vocab_size)), f));
  // The step's staging words on the device.
  const std::uint64_t packed =
      checked_add(checked_mul(3, o.max_tokens),
                  checked_add(max_table_entries(o), checked_mul(2, max_table_entries(o))));
  bytes = checked_add(bytes, checked_mul(checked_add(checked_add(o.max_tokens, rows), packed), 4));
  const RaggedSampleCapacity sampling = sample_capacity_of(o);
  bytes =
      checked_add(bytes, device_sampler_bytes(c.vocab_size, sampling.max_specs,
                                              sampling.max_penalty_entries, sampling.max_banned));
  return bytes;
}

struct CudaModelRunner::Impl {
  Impl(std::shared_ptr<const Model> model, const CudaRunnerOptions& options);
  ~Impl();

  void upload_weights();
  /// Enqueues the forward pass over `step` (`m` tokens, padded or not) and
  /// the logits of `logit_rows` rows (staging's last_rows) on the stream.
  void enqueue_forward(const DeviceRaggedStep& step, std::uint32_t m, std::uint32_t logit_rows);
  /// Enqueues the forward pass of a padded decode step of `bucket` tokens,
  /// from its captured graph (capturing it the first time).
  void launch_decode_graph(const DeviceRaggedStep& step, std::uint32_t bucket);
  WeightView device_matrix(const std::string& name) const;
  const float* device_vector(const std::string& name) const;

  std::shared_ptr<const Model> model;
  const ModelConfig& config;
  CudaRunnerOptions options;
  cudaStream_t stream = nullptr;
  WeightUploadPlan plan;
  DeviceBuffer arena;
  std::vector<DeviceLayer> layers;
  WeightView token_embedding{};
  WeightView output{};
  const float* output_norm = nullptr;
  CudaRopeConfig rope;
  PagedKvGeometry geometry;  // the blocks the scheduler sees
  PagedKvGeometry allocated; // and one more, the padding block of graphs
  DeviceBuffer key_cache, value_cache;
  std::uint32_t logit_capacity = 0;
  // Workspace.
  DeviceBuffer x, h, q, k, v, attn, gate, up, last, logits, staging_device;
  StagingLayout layout;
  PinnedBuffer staging_host;
  RaggedStepPacker packer;
  std::unique_ptr<DeviceSampler> sampler;
  std::map<std::uint32_t, cudaGraphExec_t> graphs;
  /// Rows of logits the last step left on the device; 0 before a step or
  /// after a failed one.
  std::uint32_t logit_rows = 0;
  std::uint64_t device_bytes = 0;
  CudaRunnerStats stats;
};

CudaModelRunner::Impl::Impl(std::shared_ptr<const Model> model_in,
                            const CudaRunnerOptions& options_in)
  : model(std::move(model_in))
  , config(model->config())
  , options(options_in)
  , packer(options_in.max_tokens,
           static_cast<std::uint32_t>(std::min<std::uint64_t>(
               max_table_entries(options_in), std::numeric_limits<std::uint32_t>::max())),
           static_cast<std::uint32_t>(std::min<std::uint64_t>(
               max_table_entries(options_in), std::numeric_limits<std::uint32_t>::max()))) {
  check_options(options);
  CAFLM_CUDA_CHECK(cudaSetDevice(options.device));
  // Asked for, programmatic launches are used where this device takes them.
  options.programmatic_launch = options.programmatic_launch && programmatic_launch_supported();
  std::size_t free_bytes = 0, total_bytes = 0;
  CAFLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (options.memory_budget_bytes == 0 || options.memory_budget_bytes > free_bytes)
    throw std::runtime_error("a GPU memory budget of " +
                             std::to_string(options.memory_budget_bytes >> 20) + " MiB: device " +
                             std::to_string(options.device) + " has " +
                             std::to_string(free_bytes >> 20) + " MiB free");

  plan = plan_weight_upload(model->weights());
  // Every matrix the kernels cannot take is refused now, by name, rather
  // than failing every step.
  for (const WeightUpload& tensor : plan.tensors)
    if (tensor.matrix) {
      try {
        (void)plan_gemm_launch(tensor.type, 1, tensor.rows, tensor.cols);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("the CUDA runner cannot use " + tensor.name + ": " + e.what());
      }
    }
  if (!embedding_gather_supports(plan.find("token_embd")->type))
    throw std::invalid_argument("the CUDA runner cannot gather token_embd rows of type " +
                                std::string(to_string(plan.find("token_embd")->type)));
  const std::uint64_t workspace = cuda_workspace_bytes(config, options);
  const std::uint64_t block_bytes = kv_block_bytes(
      config.n_layers, config.n_kv_heads, config.head_dim, options.block_size, sizeof(float));
  std::uint64_t blocks = kv_blocks_within_budget(options.memory_budget_bytes, plan.total_bytes,
                                                 workspace, block_bytes);
  // One block is the padding block of decode graphs, never the scheduler's.
  if (blocks < 2)
    throw std::runtime_error(
        "a GPU memory budget of " + std::to_string(options.memory_budget_bytes >> 20) +
        " MiB holds no KV cache: the weights take " + std::to_string(plan.total_bytes >> 20) +
        " MiB, the workspace " + std::to_string(workspace >> 20) + " MiB, and one KV block of " +
        std::to_string(options.block_size) + " tokens " + std::to_string(block_bytes >> 10) +
        " KiB");
  blocks -= 1;
  if (options.max_kv_blocks > 0)
    blocks = std::min<std::uint64_t>(blocks, options.max_kv_blocks);
  // The pool counts blocks in 32 bits, and every cache cell must have a
  // 32-bit slot number.
  blocks = std::min<std::uint64_t>(
      blocks, (std::uint64_t{std::numeric_limits<std::uint32_t>::max()} / options.block_size) - 2);
  geometry = PagedKvGeometry{config.n_layers, static_cast<std::uint32_t>(blocks),
                             options.block_size, config.n_kv_heads, config.head_dim};
  allocated = geometry;
  allocated.n_blocks += 1;
  check_geometry(allocated);

  CAFLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  upload_weights();

  key_cache = DeviceBuffer(allocated.cache_floats() * sizeof(float), "the KV cache's keys");
  value_cache = DeviceBuffer(allocated.cache_floats() * sizeof(float), "the KV cache's values");
  const std::uint64_t t = options.max_tokens;
  const auto floats = [](std::uint64_t n) { return n * sizeof(float); };
  x = DeviceBuffer(floats(t * config.dim), "activations");
  h = DeviceBuffer(floats(t * config.dim), "activations");
  q = DeviceBuffer(floats(t * config.q_dim()), "activations");
  attn = DeviceBuffer(floats(t * config.q_dim()), "activations");
  k = DeviceBuffer(floats(t * config.kv_dim()), "activations");
  v = DeviceBuffer(floats(t * config.kv_dim()), "activations");
  gate = DeviceBuffer(floats(t * config.ffn_dim), "activations");
  up = DeviceBuffer(floats(t * config.ffn_dim), "activations");
  logit_capacity = max_logit_rows(options);
  last = DeviceBuffer(floats(std::uint64_t{logit_capacity} * config.dim), "the last hidden states");
  logits = DeviceBuffer(floats(std::uint64_t{logit_capacity} * config.vocab_size), "the logits");
  layout = staging_layout(options.max_tokens, logit_capacity, packer.capacity_words());
  staging_device = DeviceBuffer(layout.total * 4, "the step's metadata");
  staging_host = PinnedBuffer(layout.total * 4);
  const RaggedSampleCapacity sampling = sample_capacity_of(options);
  sampler = std::make_unique<DeviceSampler>(config.vocab_size, sampling.max_specs,
                                            sampling.max_penalty_entries, sampling.max_banned);
  device_bytes = plan.total_bytes + workspace + 2 * allocated.cache_floats() * sizeof(float);
  // Untouched KV cells are never read (attention stops at a token's own
  // position), but zeros keep a stray read from ever meeting NaN bits.
  CAFLM_CUDA_CHECK(cudaMemsetAsync(key_cache.as<void>(), 0, key_cache.bytes(), stream));
  CAFLM_CUDA_CHECK(cudaMemsetAsync(value_cache.as<void>(), 0, value_cache.bytes(), stream));
  CAFLM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

CudaModelRunner::Impl::~Impl() {
  for (auto& [bucket, exec] : graphs)
    cudaGraphExecDestroy(exec);
  if (stream != nullptr)
    cudaStreamDestroy(stream);
}

void CudaModelRunner::Impl::upload_weights() {
  arena = DeviceBuffer(plan.total_bytes, "the weights");
  for (const WeightUpload& tensor : plan.tensors)
    if (!tensor.alias)
      CAFLM_CUDA_CHECK(cudaMemcpy(arena.as<std::uint8_t>() + tensor.device_offset, tensor.host_data,
                                  tensor.bytes, cudaMemcpyHostToDevice));
  const ModelWeights& w = model->weights();
  token_embedding = device_matrix("token_embd");
  output = device_matrix("output");
  output_norm = device_vector("output_norm");
  // The RoPE divisors the CPU runner would use for this context, found by
  // which of the model's vectors they are.
  const float* factors = w.rope_factors(config, options.max_context);
  const float* device_factors = nullptr;
  if (factors != nullptr) {
    if (factors == w.rope_freq_factors.data())
      device_factors = device_vector("rope_freqs");
    else if (factors == w.rope_factors_long.data())
      device_factors = device_vector("rope_factors_long");
    else
      device_factors = device_vector("rope_factors_short");
  }
  rope = CudaRopeConfig{config.rope_mode, config.head_dim,        config.rope_base,
                        device_factors,   config.rope_freq_scale, config.rope_attn_factor};
  for (std::uint32_t i = 0; i < config.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    DeviceLayer l;
    l.attn_norm = device_vector(p + "attn_norm");
    l.wq = device_matrix(p + "attn_q");
    l.wk = device_matrix(p + "attn_k");
    l.wv = device_matrix(p + "attn_v");
    l.wo = device_matrix(p + "attn_output");
    l.bq = device_vector(p + "attn_q.bias");
    l.bk = device_vector(p + "attn_k.bias");
    l.bv = device_vector(p + "attn_v.bias");
    l.bo = device_vector(p + "attn_output.bias");
    l.q_norm = device_vector(p + "attn_q_norm");
    l.k_norm = device_vector(p + "attn_k_norm");
    l.ffn_norm = device_vector(p + "ffn_norm");
    l.w_gate = device_matrix(p + "ffn_gate");
    l.w_up = device_matrix(p + "ffn_up");
    l.w_down = device_matrix(p + "ffn_down");
    l.b_gate = device_vector(p + "ffn_gate.bias");
    l.b_up = device_vector(p + "ffn_up.bias");
    l.b_down = device_vector(p + "ffn_down.bias");
    layers.push_back(l);
  }
}

WeightView CudaModelRunner::Impl::device_matrix(const std::string& name) const {
  const WeightUpload* t = plan.find(name);
  if (t == nullptr || !t->matrix)
    throw std::logic_error("CudaModelRunner: the upload plan has no matrix " + name);
  return WeightView{t->type, arena.as<std::uint8_t>() + t->device_offset, t->rows, t->cols};
}

const float* CudaModelRunner::Impl::device_vector(const std::string& name) const {
  const WeightUpload* t = plan.find(name);
  if (t == nullptr)
    return nullptr; // an optional vector the model does not have
  return reinterpret_cast<const float*>(arena.as<std::uint8_t>() + t->device_offset);
}

void CudaModelRunner::Impl::enqueue_forward(const DeviceRaggedStep& step, std::uint32_t m,
                                            std::uint32_t n_logit_rows) {
  const std::uint32_t* words = staging_device.as<std::uint32_t>();
  const auto* tokens = reinterpret_cast<const TokenId*>(words + layout.tokens);
  const std::uint32_t* last_rows = words + layout.last_rows;
  const auto* positions = reinterpret_cast<const std::int32_t*>(step.positions);
  const std::uint64_t dim = config.dim, q_dim = config.q_dim(), kv_dim = config.kv_dim();
  const std::uint64_t ffn = config.ffn_dim;
  // Every kernel of the forward pass but the first may start while the one
  // before it ends (programmatic_launch.cuh).
  const bool programmatic = options.programmatic_launch;
  float* xs = x.as<float>();
  float* hs = h.as<float>();
  float* qs = q.as<float>();
  float* ks = k.as<float>();
  float* vs = v.as<float>();
  float* as = attn.as<float>();
  float* gs = gate.as<float>();
  float* us = up.as<float>();

  launch_embedding_gather(token_embedding.data, token_embedding.type, token_embedding.rows,
                          token_embedding.cols, tokens, m, xs, stream);
  for (std::uint32_t layer = 0; layer < config.n_layers; ++layer) {
    const DeviceLayer& w = layers[layer];
    // Attention block: x += wo · attention(rope(q), rope(k), v).
    launch_rms_norm(xs, m, dim, w.attn_norm, config.rms_eps, hs, stream, programmatic);
    launch_linear(w.wq, hs, dim, m, w.bq, qs, q_dim, stream, programmatic);
    launch_linear(w.wk, hs, dim, m, w.bk, ks, kv_dim, stream, programmatic);
    launch_linear(w.wv, hs, dim, m, w.bv, vs, kv_dim, stream, programmatic);
    if (config.qk_norm) {
      launch_head_rms_norm(qs, m, config.n_heads, config.head_dim, w.q_norm, config.rms_eps, qs,
                           stream, programmatic);
      launch_head_rms_norm(ks, m, config.n_kv_heads, config.head_dim, w.k_norm, config.rms_eps, ks,
                           stream, programmatic);
    }
    launch_rope(qs, m, config.n_heads, positions, rope, stream, programmatic);
    launch_rope(ks, m, config.n_kv_heads, positions, rope, stream, programmatic);
    float* layer_keys = key_cache.as<float>() + layer * allocated.layer_floats();
    float* layer_values = value_cache.as<float>() + layer * allocated.layer_floats();
    launch_store_kv(ks, vs, layer_keys, layer_values, step, allocated, stream, programmatic);
    launch_paged_attention(qs, layer_keys, layer_values, as, config.n_heads, step, allocated,
                           stream, programmatic);
    launch_linear(w.wo, as, q_dim, m, w.bo, hs, dim, stream, programmatic);
    launch_residual_add(xs, hs, m * dim, xs, stream, programmatic);
    // Feed-forward block: x += w_down · (silu(w_gate · h) * (w_up · h)).
    launch_rms_norm(xs, m, dim, w.ffn_norm, config.rms_eps, hs, stream, programmatic);
    launch_linear(w.w_gate, hs, dim, m, w.b_gate, gs, ffn, stream, programmatic);
    launch_linear(w.w_up, hs, dim, m, w.b_up, us, ffn, stream, programmatic);
    launch_silu_mul(gs, us, m, ffn, gs, stream, programmatic);
    launch_linear(w.w_down, gs, ffn, m, w.b_down, hs, dim, stream, programmatic);
    launch_residual_add(xs, hs, m * dim, xs, stream, programmatic);
  }
  // Logits only for the rows asked for: each item's last token.
  launch_gather_rows(xs, last_rows, n_logit_rows, dim, last.as<float>(), stream, programmatic);
  launch_rms_norm(last.as<float>(), n_logit_rows, dim, output_norm, config.rms_eps,
                  last.as<float>(), stream, programmatic);
  launch_linear(output, last.as<float>(), dim, n_logit_rows, nullptr, logits.as<float>(),
                config.vocab_size, stream, programmatic);
}

void CudaModelRunner::Impl::launch_decode_graph(const DeviceRaggedStep& step,
                                                std::uint32_t bucket) {
  auto found = graphs.find(bucket);
  if (found == graphs.end()) {
    // Every pointer the pass reads sits at a place fixed by the bucket (the
    // packed sections of a `bucket`-token step), and every size is the
    // bucket's, so one capture serves every later step of this bucket.
    cudaGraph_t graph = nullptr;
    CAFLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_forward(step, bucket, bucket);
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr)
        cudaGraphDestroy(graph);
      throw;
    }
    CAFLM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CAFLM_CUDA_CHECK(status);
    found = graphs.emplace(bucket, exec).first;
    ++stats.graphs_captured;
  }
  CAFLM_CUDA_CHECK(cudaGraphLaunch(found->second, stream));
  ++stats.graph_replays;
}

CudaModelRunner::CudaModelRunner(std::shared_ptr<const Model> model,
                                 const CudaRunnerOptions& options)
  : impl_(std::make_unique<Impl>(std::move(model), options)) {}

CudaModelRunner::~CudaModelRunner() = default;

std::uint32_t CudaModelRunner::vocab_size() const {
  return impl_->config.vocab_size;
}

std::uint32_t CudaModelRunner::kv_blocks() const {
  return impl_->geometry.n_blocks;
}

const CudaRunnerOptions& CudaModelRunner::options() const {
  return impl_->options;
}

std::uint64_t CudaModelRunner::device_bytes() const {
  return impl_->device_bytes;
}

CudaRunnerStats CudaModelRunner::stats() const {
  return impl_->stats;
}

Expected<RaggedBatchReceipt, BackendError>
CudaModelRunner::execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) {
  Impl& s = *impl_;
  s.logit_rows = 0;
  if (batch.item_count > s.options.max_items || batch.item_count == 0)
    return BackendError::InvalidBatch;
  for (std::uint32_t t = 0; t < batch.token_count; ++t)
    if (batch.tokens[t] >= s.config.vocab_size)
      return BackendError::InvalidBatch;
  bool decode_only = true;
  for (std::uint32_t i = 0; i < batch.item_count; ++i)
    decode_only = decode_only && batch.items[i].query_length == 1;
  const std::uint32_t bucket =
      s.options.cuda_graphs && decode_only
          ? decode_graph_bucket(batch.token_count, std::min(s.options.max_tokens, s.logit_capacity))
          : 0;
  const std::uint32_t m = bucket > 0 ? bucket : batch.token_count;
  const std::uint32_t logit_rows = bucket > 0 ? bucket : batch.item_count;
  try {
    const RaggedStepSections& sections = s.packer.pack(
        batch, s.geometry, s.options.max_context, bucket, /*padding_block=*/s.geometry.n_blocks);
    // One upload: tokens, last rows, packed step (padding rows read token 0
    // and give their own row's logits, which nobody reads).
    std::uint32_t* staged = s.staging_host.as<std::uint32_t>();
    std::memcpy(staged + s.layout.tokens, batch.tokens, batch.token_count * sizeof(TokenId));
    std::fill(staged + s.layout.tokens + batch.token_count, staged + s.layout.tokens + m, 0u);
    for (std::uint32_t i = 0; i < batch.item_count; ++i)
      staged[s.layout.last_rows + i] =
          batch.items[i].token_offset + batch.items[i].query_length - 1;
    for (std::uint32_t row = batch.item_count; row < logit_rows; ++row)
      staged[s.layout.last_rows + row] = row;
    std::memcpy(staged + s.layout.packed, s.packer.words(), sections.total * 4);
    CAFLM_CUDA_CHECK(cudaMemcpyAsync(s.staging_device.as<void>(), staged,
                                     (s.layout.packed + sections.total) * 4, cudaMemcpyHostToDevice,
                                     s.stream));
    const DeviceRaggedStep step =
        device_step(sections, s.staging_device.as<std::uint32_t>() + s.layout.packed);
    // Copy-on-write first, outside any graph: whole blocks of every layer.
    launch_copy_blocks(s.key_cache.as<float>(), s.value_cache.as<float>(), step,
                       s.packer.copy_wave_ends(), s.allocated, s.stream);
    if (bucket > 0)
      s.launch_decode_graph(step, bucket);
    else
      s.enqueue_forward(step, m, logit_rows);
    if (logits != nullptr)
      CAFLM_CUDA_CHECK(
          cudaMemcpyAsync(logits, s.logits.as<float>(),
                          std::uint64_t{batch.item_count} * s.config.vocab_size * sizeof(float),
                          cudaMemcpyDeviceToHost, s.stream));
    // A fault while the step ran surfaces here, as this step's failure.
    CAFLM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  } catch (const std::invalid_argument&) {
    return BackendError::InvalidBatch;
  } catch (const std::bad_alloc&) {
    return BackendError::OutOfMemory;
  } catch (const std::runtime_error&) {
    return BackendError::DeviceFailure;
  }
  s.logit_rows = logit_rows;
  ++s.stats.steps;
  for (std::uint32_t i = 0; i < batch.item_count; ++i)
    outputs[i] = RaggedBatchOutput{batch.items[i].request_id, batch.items[i].slot,
                                   batch.items[i].query_length};
  return RaggedBatchReceipt{batch.item_count, 1, batch.token_count};
}

RaggedSampleCapacity CudaModelRunner::sample_capacity() const {
  return sample_capacity_of(impl_->options);
}

Expected<std::uint32_t, BackendError> CudaModelRunner::sample(const RaggedSampleBatch& batch,
                                                              RaggedSampleResult* results,
                                                              RaggedTopLogprob* top_logprobs) {
  Impl& s = *impl_;
  if (s.logit_rows == 0)
    return BackendError::InvalidBatch;
  try {
    s.sampler->sample(s.logits.as<float>(), s.logit_rows, batch, results, top_logprobs, s.stream);
  } catch (const std::invalid_argument&) {
    return BackendError::InvalidBatch;
  } catch (const std::runtime_error&) {
    return BackendError::DeviceFailure;
  }
  return batch.spec_count;
}

} // namespace caflm::cuda
