// `caflm inspect FILE`: what a GGUF file holds and what running it takes.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/model/model.hpp"

namespace caflm::apps {

namespace {

struct InspectOptions {
  std::string file;
  std::uint32_t context = 0; // 0: the model's
  std::uint32_t replicas = 1;
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  bool json = false;
};

/// Array elements shown before "...": a vocabulary's 150,000 tokens are
/// better counted than printed.
constexpr std::size_t kShownElements = 8;
/// Characters of a string value shown in the text listing.
constexpr std::size_t kShownChars = 72;

/// The element type and length of an array value, or nullopt for a scalar.
/// A raw array is its element type (uint32) and length (uint64), then the
/// elements.
std::optional<std::pair<GgufValueType, std::uint64_t>> array_shape(const GgufFile& file,
                                                                   const std::string& key) {
  const std::optional<GgufRawValue> raw = file.raw_value(key);
  if (!raw || raw->type != GgufValueType::ARRAY)
    return std::nullopt;
  std::uint32_t element_type = 0;
  std::uint64_t length = 0;
  std::memcpy(&element_type, raw->bytes, sizeof element_type);
  std::memcpy(&length, raw->bytes + sizeof element_type, sizeof length);
  return std::make_pair(static_cast<GgufValueType>(element_type), length);
}

/// One metadata value as JSON; arrays are cut to their first `max_elements`.
nlohmann::json value_json(const GgufFile& file, const std::string& key, std::size_t max_elements) {
  auto cut = [&](const auto& values) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < values.size() && i < max_elements; ++i)
      out.push_back(values[i]);
    return out;
  };
  if (auto array = array_shape(file, key)) {
    switch (array->first) {
    case GgufValueType::STRING: {
      const std::vector<std::string_view> strings = *file.get_string_array(key);
      return cut(std::vector<std::string>(strings.begin(), strings.end()));
    }
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return cut(*file.get_float_array(key));
    case GgufValueType::ARRAY:
    case GgufValueType::BOOL:
      return nlohmann::json::array(); // only their count is shown
    default:
      return cut(*file.get_int_array(key));
    }
  }
  switch (*file.value_type(key)) {
  case GgufValueType::STRING:
    return std::string(*file.get_string(key));
  case GgufValueType::BOOL:
    return *file.get_bool(key);
  case GgufValueType::FLOAT32:
  case GgufValueType::FLOAT64:
    return *file.get_float(key);
  case GgufValueType::INT8:
  case GgufValueType::INT16:
  case GgufValueType::INT32:
  case GgufValueType::INT64:
    return *file.get_int(key);
  default:
    return *file.get_uint(key);
  }
}

std::string shape_string(const std::vector<std::uint64_t>& dims) {
  std::string out;
  for (std::size_t i = 0; i < dims.size(); ++i)
    out += fmt::format("{}{}", i ? " x " : "", dims[i]);
  return out;
}

/// What running the model takes: the mapped weights once, and per replica
/// a KV cache holding one whole context plus the engine's step buffers.
struct MemoryEstimate {
  std::uint32_t context;
  KvCacheType kv_cache_type;
  std::uint64_t weight_bytes;
  std::uint64_t kv_bytes_per_replica;
  std::uint64_t engine_bytes_per_replica; // KV cache included
  std::uint64_t total_bytes;
};

MemoryEstimate estimate_memory(const Model& model, std::uint64_t weight_bytes,
                               const InspectOptions& options) {
  const ModelConfig& m = model.config();
  MemoryEstimate estimate{};
  estimate.context = options.context == 0 ? m.context_length : options.context;
  EngineOptions engine;
  engine.max_context = estimate.context;
  estimate.kv_cache_type = options.kv_cache_type.value_or(auto_kv_cache_type(model));
  engine.kv_cache_type = estimate.kv_cache_type;
  // Whole blocks, as the pool allocates them.
  engine.kv_cache_bytes =
      cpu_kv_blocks_for(estimate.context) * cpu_kv_block_bytes(m, estimate.kv_cache_type);
  const EngineConfig config = cpu_engine_config(model, engine);
  estimate.weight_bytes = weight_bytes;
  estimate.kv_bytes_per_replica = engine.kv_cache_bytes;
  estimate.engine_bytes_per_replica = cpu_engine_bytes(model, config);
  estimate.total_bytes = weight_bytes + options.replicas * estimate.engine_bytes_per_replica;
  return estimate;
}

void run_inspect(const InspectOptions& options) {
  // The file is read once: as a model when caflm can run it; otherwise (a
  // vocabulary-only file, an architecture caflm does not run) it is listed
  // all the same, and the memory estimate says why there is none.
  std::shared_ptr<const Model> model;
  std::optional<GgufFile> unrunnable;
  std::string no_estimate;
  try {
    model = Model::load(options.file);
  } catch (const std::exception& e) {
    no_estimate = e.what();
    unrunnable.emplace(GgufFile::open(options.file));
  }
  const GgufFile& file = model ? model->file() : *unrunnable;
  std::uint64_t parameters = 0;
  std::uint64_t weight_bytes = 0;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    parameters += tensor.n_elements;
    weight_bytes += tensor.n_bytes;
  }
  if (file.tensors().empty())
    no_estimate = "the file holds no tensors";
  std::optional<MemoryEstimate> memory;
  if (model) {
    try {
      memory = estimate_memory(*model, weight_bytes, options);
    } catch (const std::exception& e) {
      no_estimate = e.what();
    }
  }

  if (options.json) {
    nlohmann::json out;
    out["file"] = options.file;
    out["version"] = file.version();
    out["metadata"] = nlohmann::json::object();
    for (std::string_view key : file.keys()) {
      const std::string k(key);
      nlohmann::json entry{{"type", to_string(*file.value_type(k))},
                           {"value", value_json(file, k, kShownElements)}};
      if (auto array = array_shape(file, k)) {
        entry["type"] = fmt::format("array of {}", to_string(array->first));
        entry["length"] = array->second;
      }
      out["metadata"][k] = std::move(entry);
    }
    out["tensors"] = nlohmann::json::array();
    for (const GgufTensorInfo& tensor : file.tensors())
      out["tensors"].push_back({{"name", tensor.name},
                                {"type", to_string(tensor.type)},
                                {"shape", tensor.dims},
                                {"bytes", tensor.n_bytes}});
    out["parameters"] = parameters;
    out["tensor_bytes"] = weight_bytes;
    if (memory) {
      out["memory"] = {{"context", memory->context},
                       {"replicas", options.replicas},
                       {"kv_cache_type", to_string(memory->kv_cache_type)},
                       {"weight_bytes", memory->weight_bytes},
                       {"kv_cache_bytes_per_replica", memory->kv_bytes_per_replica},
                       {"engine_bytes_per_replica", memory->engine_bytes_per_replica},
                       {"total_bytes", memory->total_bytes}};
    } else {
      out["memory"] = {{"error", no_estimate}};
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }

  std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors\n\n", options.file.c_str(),
              file.version(), file.keys().size(), file.tensors().size());
  std::printf("metadata:\n");
  for (std::string_view key : file.keys()) {
    const std::string k(key);
    std::string shown;
    if (auto array = array_shape(file, k)) {
      const nlohmann::json head = value_json(file, k, kShownElements);
      shown = fmt::format("[{} x {}] {}{}", array->second, to_string(array->first), head.dump(),
                          array->second > kShownElements ? " ..." : "");
    } else {
      shown = value_json(file, k, 0).dump();
    }
    if (shown.size() > kShownChars)
      shown = shown.substr(0, kShownChars) + fmt::format("... ({} chars)", shown.size());
    std::printf("  %-44s %s\n", k.c_str(), shown.c_str());
  }
  std::printf("\ntensors:\n  %-36s %-6s %-22s %s\n", "name", "type", "shape", "bytes");
  for (const GgufTensorInfo& tensor : file.tensors())
    std::printf("  %-36s %-6s %-22s %" PRIu64 "\n", tensor.name.c_str(), to_string(tensor.type),
                shape_string(tensor.dims).c_str(), tensor.n_bytes);
  const bool billions = parameters >= 1000000000;
  std::printf("\nparameters: %" PRIu64 " (%.2f %s), tensor data %s\n", parameters,
              double(parameters) / (billions ? 1e9 : 1e6), billions ? "B" : "M",
              human_bytes(weight_bytes).c_str());
  if (!memory) {
    std::printf("memory: no estimate: %s\n", no_estimate.c_str());
    return;
  }
  std::printf("memory for a context of %u tokens and %u replica%s: %s\n", memory->context,
              options.replicas, options.replicas == 1 ? "" : "s",
              human_bytes(memory->total_bytes).c_str());
  std::printf("  weights (mapped once, shared by the replicas of a process): %s\n",
              human_bytes(memory->weight_bytes).c_str());
  std::printf("  per replica: %s, of which KV cache %s (%s)\n",
              human_bytes(memory->engine_bytes_per_replica).c_str(),
              human_bytes(memory->kv_bytes_per_replica).c_str(), to_string(memory->kv_cache_type));
}

} // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Print a GGUF file's metadata and tensors, and the memory running it takes");
  cmd->add_option("file", options->file, "GGUF file")->required();
  cmd->add_option("--context", options->context,
                  "Tokens of context to size the KV cache for (default: the model's)");
  cmd->add_option("--replicas", options->replicas, "Engine replicas to size for")
      ->check(at_least_one())
      ->capture_default_str();
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->callback([options] { run_inspect(*options); });
}

} // namespace caflm::apps
