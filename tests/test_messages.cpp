// Every message type crosses the network: each round-trips through CAF's
// binary serialization, alone and inside a type-erased message (which needs
// the type registered under its name).
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>

#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"

using namespace caflm;

namespace {

struct Fixture {
  Fixture()
    : sys(init(cfg)) {}
  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  /// Serializes `value` alone and inside a message, and reads both back.
  template <class T>
  std::pair<T, T> round_trip(T value) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto msg = caf::make_message(value);
    REQUIRE_FALSE(sink(value));
    REQUIRE_FALSE(sink(msg));
    caf::binary_deserializer source{sys, buf};
    T direct;
    caf::message wrapped;
    REQUIRE_FALSE(source(direct));
    REQUIRE_FALSE(source(wrapped));
    REQUIRE(wrapped.match_elements<T>());
    return {direct, wrapped.get_as<T>(0)};
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
};

SamplingParams unusual_params() {
  SamplingParams p;
  p.max_tokens = 77;
  p.temperature = 0.25f;
  p.top_k = 9;
  p.top_p = 0.5f;
  p.min_p = 0.125f;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = -0.5f;
  p.frequency_penalty = 0.75f;
  p.penalty_last_n = -1;
  p.seed = 0xdeadbeefcafe;
  p.stop = {"\n\n", "END"};
  p.ignore_eos = true;
  p.logprobs = true;
  p.top_logprobs = 3;
  return p;
}

bool same(const SamplingParams& a, const SamplingParams& b) {
  return a.max_tokens == b.max_tokens && a.temperature == b.temperature && a.top_k == b.top_k &&
         a.top_p == b.top_p && a.min_p == b.min_p && a.repetition_penalty == b.repetition_penalty &&
         a.presence_penalty == b.presence_penalty && a.frequency_penalty == b.frequency_penalty &&
         a.penalty_last_n == b.penalty_last_n && a.seed == b.seed && a.stop == b.stop &&
         a.ignore_eos == b.ignore_eos && a.logprobs == b.logprobs &&
         a.top_logprobs == b.top_logprobs;
}

} // namespace

TEST_CASE_METHOD(Fixture, "SamplingParams round-trips, with and without a seed") {
  auto [direct, wrapped] = round_trip(unusual_params());
  CHECK(same(direct, unusual_params()));
  CHECK(same(wrapped, unusual_params()));
  SamplingParams unseeded = unusual_params();
  unseeded.seed.reset();
  auto [direct_unseeded, wrapped_unseeded] = round_trip(unseeded);
  CHECK_FALSE(direct_unseeded.seed.has_value());
  CHECK_FALSE(wrapped_unseeded.seed.has_value());
  // Seed 0 is a seed like any other, not "none".
  SamplingParams zero = unusual_params();
  zero.seed = 0;
  CHECK(round_trip(zero).first.seed == std::optional<std::uint64_t>(0));
}

TEST_CASE_METHOD(Fixture, "GenerateRequest round-trips") {
  GenerateRequest r;
  r.id = 42;
  r.attempt = 3;
  r.prompt = "Grüße, 世界";
  r.prompt_tokens = {1, 2, 3};
  r.params = unusual_params();
  r.priority = -3;
  r.generated = {9, 8};
  for (const auto& x : {round_trip(r).first, round_trip(r).second}) {
    CHECK(x.id == 42);
    CHECK(x.attempt == 3);
    CHECK(x.prompt == r.prompt);
    CHECK(x.prompt_tokens == r.prompt_tokens);
    CHECK(same(x.params, r.params));
    CHECK(x.priority == -3);
    CHECK(x.generated == r.generated);
  }
}

TEST_CASE_METHOD(Fixture, "TokenBatch with chunks round-trips") {
  TokenChunk c;
  c.request_id = 7;
  c.attempt = 2;
  c.first_token = 40;
  c.prompt_tokens = {1, 5};
  c.tokens = {10, 11};
  c.text = "hé";
  c.logprobs = {-0.5f, -1.25f};
  c.top_logprobs = {{{10, -0.5f}, {12, -2.0f}}, {{11, -1.25f}}};
  c.finish = FinishReason::Length;
  c.usage = Usage{2, 2, 1};
  TokenBatch batch{{c, TokenChunk{}}};
  for (const auto& x : {round_trip(batch).first, round_trip(batch).second}) {
    REQUIRE(x.chunks.size() == 2);
    const TokenChunk& y = x.chunks[0];
    CHECK(y.request_id == 7);
    CHECK(y.attempt == 2);
    CHECK(y.first_token == 40);
    CHECK(y.prompt_tokens == c.prompt_tokens);
    CHECK(y.tokens == c.tokens);
    CHECK(y.text == c.text);
    CHECK(y.logprobs == c.logprobs);
    REQUIRE(y.top_logprobs.size() == 2);
    CHECK(y.top_logprobs[0][1].token == 12);
    CHECK(y.top_logprobs[0][1].logprob == -2.0f);
    CHECK(y.finish == FinishReason::Length);
    CHECK(y.usage.cached_prompt_tokens == 1);
    CHECK(x.chunks[1].finish == FinishReason::None);
  }
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// CAF 0.17 writes floats through a loop that never ends for an infinity; a
// -inf logprob (a banned token among the top ones) must still travel.
TEST_CASE_METHOD(Fixture, "infinities and NaN in messages travel bit for bit") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  TokenChunk c;
  c.tokens = {1, 2, 3, 4};
  c.logprobs = {-inf, inf, nan, -tiny};
  c.top_logprobs = {{{9, -inf}}, {}, {}, {}};
  c.queue_seconds = std::numeric_limits<double>::infinity();
  TokenBatch batch{{c}};
  auto trip = std::async(std::launch::async, [&] { return round_trip(batch); });
  if (trip.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    FAIL_CHECK("saving a message with an infinity does not return");
    std::_Exit(1); // the serializing thread cannot be stopped
  }
  const auto [direct, wrapped] = trip.get();
  for (const TokenBatch& x : {direct, wrapped}) {
    REQUIRE(x.chunks.size() == 1);
    const TokenChunk& y = x.chunks[0];
    REQUIRE(y.logprobs.size() == 4);
    for (std::size_t i = 0; i < 4; ++i)
      CHECK(bits_of(y.logprobs[i]) == bits_of(c.logprobs[i]));
    CHECK(bits_of(y.top_logprobs[0][0].logprob) == bits_of(-inf));
    CHECK(y.queue_seconds == c.queue_seconds);
  }
}

TEST_CASE_METHOD(Fixture, "InferenceError, Admission and LoadReport round-trip") {
  InferenceError e{5, 1, InferenceErrorCode::context_length_exceeded, "prompt of 9000 tokens"};
  for (const auto& x : {round_trip(e).first, round_trip(e).second}) {
    CHECK(x.request_id == 5);
    CHECK(x.attempt == 1);
    CHECK(x.code == InferenceErrorCode::context_length_exceeded);
    CHECK(x.message == e.message);
  }
  Admission a{6, 4, false, InferenceError{6, 4, InferenceErrorCode::backpressure, "queue full"}};
  for (const auto& x : {round_trip(a).first, round_trip(a).second}) {
    CHECK(x.request_id == 6);
    CHECK(x.attempt == 4);
    CHECK_FALSE(x.accepted);
    CHECK(x.error.code == InferenceErrorCode::backpressure);
  }
  LoadReport l{3, 4, 100, 200, 60, 0.5, 19.0, 7, 1000, 500, 640, 320, 4321};
  for (const auto& x : {round_trip(l).first, round_trip(l).second}) {
    CHECK(x.running == 3);
    CHECK(x.waiting == 4);
    CHECK(x.free_blocks == 100);
    CHECK(x.total_blocks == 200);
    CHECK(x.cached_blocks == 60);
    CHECK(x.prefix_hit_rate == 0.5);
    CHECK(x.score == 19.0);
    CHECK(x.preemptions == 7);
    CHECK(x.prompt_tokens == 1000);
    CHECK(x.generated_tokens == 500);
    CHECK(x.prefix_queried_tokens == 640);
    CHECK(x.prefix_hit_tokens == 320);
    CHECK(x.computed_tokens == 4321);
  }
  CoordinatorStats s{2, 9, {l, l}, {}};
  for (const auto& x : {round_trip(s).first, round_trip(s).second}) {
    CHECK(x.engines == 2);
    CHECK(x.routed == 9);
    CHECK(x.loads.size() == 2);
  }
}

TEST_CASE_METHOD(Fixture, "actor handles round-trip inside messages") {
  auto sink = sys.spawn([]() -> token_sink::behavior_type {
    return {[](const TokenBatch&) {}, [](const InferenceError&) {}};
  });
  auto [direct, wrapped] = round_trip(sink);
  CHECK(direct == sink);
  CHECK(wrapped == sink);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}
