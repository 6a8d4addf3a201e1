// libFuzzer target for the messages a peer sends over CAF: the first input
// byte picks a type registered in caflm/messages/type_registry.cpp (or a
// type-erased caf::message, as BASP delivers one), and the rest is read into
// it with caf::binary_deserializer. What must hold, for any input:
// - loading returns success or an error; it does not crash, trip a sanitizer,
//   throw anything but std::exception, or allocate beyond libFuzzer's
//   -malloc_limit_mb / -rss_limit_mb for a short input;
// - a value that loads is stable: saved, loaded again and saved again, it gives
//   the same bytes (so no field is lost or changed on the way, the sampling
//   seed's flag and value included), and saving ends for every float,
//   infinity and NaN included (CAF 0.17's own float encoding loops forever on
//   infinity; messages.hpp sends bit patterns instead);
// - an InferenceError's code, whatever its number, has a name and a retry rule.
// A thrown exception or error return is fine. See fuzz/CMakeLists.txt for how
// to build and run it.
//
// With CAFLM_FUZZ_SEEDS_OUT=DIR set it writes a seed corpus (one saved value
// of every type, alone and inside a message) to DIR and exits.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace caflm;

caf::actor_system* actor_system = nullptr;

/// Saves `value`; CAF reports failure as an error, never as an exception here.
template <class T>
std::vector<char> save(T& value) {
  std::vector<char> bytes;
  caf::binary_serializer sink{*actor_system, bytes};
  if (auto err = sink(value)) {
    std::fprintf(stderr, "messages_fuzz: a loaded value does not save: %s\n",
                 actor_system->render(err).c_str());
    std::abort();
  }
  return bytes;
}

template <class T>
void check_loaded(T&) {}

void check_loaded(InferenceError& error) {
  volatile const char* name = to_string(error.code);
  volatile bool retry = retryable(error.code);
  (void)name;
  (void)retry;
}

void check_loaded(Admission& admission) {
  check_loaded(admission.error);
}

/// Loads a T from `data`; if that succeeds, checks the value is stable.
template <class T>
void load(const uint8_t* data, size_t size) {
  T value;
  caf::binary_deserializer source{*actor_system, reinterpret_cast<const char*>(data), size};
  if (source(value)) {
    return; // an error: the bytes are no T
  }
  check_loaded(value);
  const std::vector<char> saved = save(value);
  T reloaded;
  caf::binary_deserializer again{*actor_system, saved};
  if (auto err = again(reloaded)) {
    std::fprintf(stderr, "messages_fuzz: a saved value does not load: %s\n",
                 actor_system->render(err).c_str());
    std::abort();
  }
  if (again.remaining() != 0 || save(reloaded) != saved) {
    std::fprintf(stderr, "messages_fuzz: a value changed on its way through save and load\n");
    std::abort();
  }
}

using Loader = void (*)(const uint8_t*, size_t);

/// Every type a peer may send, in the order of the selector byte.
constexpr Loader kLoaders[] = {
    load<caf::message>, // what BASP delivers: any registered types, by name
    load<SamplingParams>,
    load<TokenLogprob>,
    load<std::vector<TokenLogprob>>,
    load<std::vector<std::vector<TokenLogprob>>>,
    load<InferenceError>,
    load<GenerateRequest>,
    load<Usage>,
    load<TokenChunk>,
    load<std::vector<TokenChunk>>,
    load<TokenBatch>,
    load<Admission>,
    load<LoadReport>,
    load<std::vector<LoadReport>>,
    load<CoordinatorStats>,
    load<RemoteEngineStatus>,
    load<std::vector<std::uint64_t>>,
    load<std::vector<TokenId>>,
    load<token_sink>,
    load<engine_core_actor>,
    load<dp_coordinator_actor>,
};
constexpr size_t kNumLoaders = sizeof(kLoaders) / sizeof(kLoaders[0]);

// -- seeds --------------------------------------------------------------------

SamplingParams seed_params() {
  SamplingParams p;
  p.max_tokens = 77;
  p.temperature = 0.25f;
  p.top_k = 9;
  p.top_p = 0.5f;
  p.seed = 0xdeadbeefcafe;
  p.stop = {"\n\n", "END"};
  p.top_logprobs = 2;
  return p;
}

constexpr float kInfinity = std::numeric_limits<float>::infinity();

TokenChunk seed_chunk() {
  TokenChunk c;
  c.request_id = 7;
  c.attempt = 1;
  c.first_token = 3;
  c.prompt_tokens = {1, 15043};
  c.tokens = {3186, 29991};
  c.text = " world!";
  c.logprobs = {-0.5f, -1.25f};
  // A banned token's logprob is -inf (CAF 0.17's own float encoding hung on it).
  c.top_logprobs = {{TokenLogprob{3186, -0.5f}, TokenLogprob{2, -kInfinity}},
                    {TokenLogprob{5, std::numeric_limits<float>::quiet_NaN()}}};
  c.finish = FinishReason::Stop;
  c.usage = Usage{2, 2, 1};
  c.queue_seconds = 0.125f;
  return c;
}

/// Writes `selector` followed by `value` saved alone, and the same inside a
/// caf::message (selector 0), as two seed files.
template <class T>
void write_seed(const std::string& dir, size_t selector, T value) {
  const auto write = [&](size_t chosen, const std::vector<char>& bytes, const char* what) {
    const std::string path = dir + "/" + std::to_string(selector) + "-" + what;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.put(static_cast<char>(chosen));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "messages_fuzz: cannot write %s\n", path.c_str());
      std::exit(1);
    }
  };
  write(selector, save(value), "value");
  caf::message message = caf::make_message(value);
  write(0, save(message), "message");
}

void write_seeds(const std::string& dir) {
  GenerateRequest request;
  request.id = 42;
  request.attempt = 2;
  request.prompt = "Hello";
  request.prompt_tokens = {1, 15043};
  request.params = seed_params();
  request.priority = -3;
  request.generated = {3186};
  request.prefill_group = 9;
  LoadReport load_report;
  load_report.running = 3;
  load_report.waiting = 1;
  load_report.prefix_hit_rate = std::numeric_limits<double>::infinity();
  const InferenceError error{7, 1, InferenceErrorCode::backpressure, "queue full"};
  size_t selector = 1;
  write_seed(dir, selector++, seed_params());
  write_seed(dir, selector++, TokenLogprob{5, -0.75f});
  write_seed(dir, selector++, seed_chunk().top_logprobs.front());
  write_seed(dir, selector++, seed_chunk().top_logprobs);
  write_seed(dir, selector++, error);
  write_seed(dir, selector++, request);
  write_seed(dir, selector++, Usage{4, 5, 6});
  write_seed(dir, selector++, seed_chunk());
  write_seed(dir, selector++, std::vector<TokenChunk>{seed_chunk(), TokenChunk{}});
  write_seed(dir, selector++, TokenBatch{{seed_chunk()}});
  write_seed(dir, selector++, Admission::refuse(7, 1, InferenceErrorCode::bad_request, "empty"));
  write_seed(dir, selector++, load_report);
  write_seed(dir, selector++, std::vector<LoadReport>{load_report, LoadReport{}});
  write_seed(dir, selector++, CoordinatorStats{2, 10, {load_report}, {}});
  write_seed(dir, selector++, RemoteEngineStatus{false, "refused"});
  write_seed(dir, selector++, std::vector<std::uint64_t>{1, 1ull << 40});
  write_seed(dir, selector++, std::vector<TokenId>{1, 2, 3});
  write_seed(dir, selector++, token_sink{});
  write_seed(dir, selector++, engine_core_actor{});
  write_seed(dir, selector++, dp_coordinator_actor{});
  if (selector != kNumLoaders) {
    std::fprintf(stderr, "messages_fuzz: the seeds miss a type\n");
    std::exit(1);
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto* config = new caf::actor_system_config;
  add_message_types(*config);
  config->set("logger.file-verbosity", caf::atom("quiet"));
  config->set("logger.console-verbosity", caf::atom("quiet"));
  // Never destroyed: its threads outlive the fuzzing loop, and libFuzzer
  // exits without unwinding.
  actor_system = new caf::actor_system(*config);
  if (const char* dir = std::getenv("CAFLM_FUZZ_SEEDS_OUT")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  try {
    kLoaders[data[0] % kNumLoaders](data + 1, size - 1);
  } catch (const std::exception&) {
    // A refusal by exception is as good as an error return.
  }
  return 0;
}
