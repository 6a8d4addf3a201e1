// CAF's own per-message cost on caflm's token path, with no engine and no
// caflm actor logic: a detached producer (the worker's place) sends each of
// `streams` relays (request actors) one TokenBatch of one chunk per round;
// each relay moves it on to its own sink, which counts tokens. What this
// reaches is the ceiling of bench_actor_pipeline's local scenario at the
// same tokens per chunk.
//
//   bench_caf_message [--streams 256] [--rounds 1024] [--tokens 1]...
//                     [--repeat 3] [--scheduler-threads 0]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <future>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"

namespace {

using namespace caflm;
using Clock = std::chrono::steady_clock;

struct Counts {
  std::atomic<std::uint64_t> tokens{0};
  std::atomic<std::uint32_t> sinks_done{0};
  std::uint32_t streams = 0;
  std::uint64_t tokens_per_sink = 0;
  std::promise<Clock::time_point> done;
};

struct SinkState {
  std::uint64_t tokens = 0;
};

caf::behavior counting_sink(caf::stateful_actor<SinkState>* self, std::shared_ptr<Counts> counts) {
  return {[self, counts](const TokenBatch& batch) {
    for (const TokenChunk& chunk : batch.chunks)
      self->state.tokens += chunk.tokens.size();
    if (self->state.tokens == counts->tokens_per_sink) {
      counts->tokens.fetch_add(self->state.tokens, std::memory_order_relaxed);
      if (counts->sinks_done.fetch_add(1) + 1 == counts->streams)
        counts->done.set_value(Clock::now());
      self->quit();
    }
  }};
}

caf::behavior relay(caf::event_based_actor* self, caf::actor sink) {
  return {[self, sink](TokenBatch& batch) { self->send(sink, std::move(batch)); }};
}

/// Sends each relay one batch per round, a round per message to itself,
/// as the worker steps.
caf::behavior producer(caf::event_based_actor* self, std::vector<caf::actor> relays,
                       std::uint32_t rounds, std::uint32_t tokens) {
  auto round = std::make_shared<std::uint32_t>(0);
  self->send(self, caf::atom("step"));
  return {[=](caf::atom_value) {
    for (std::size_t r = 0; r < relays.size(); ++r) {
      TokenBatch batch;
      TokenChunk chunk;
      chunk.request_id = r;
      chunk.first_token = *round * tokens;
      chunk.tokens.assign(tokens, TokenId{'a'});
      chunk.logprobs.assign(tokens, 0.0f);
      chunk.text.assign(tokens, 'a');
      batch.chunks.push_back(std::move(chunk));
      self->send(relays[r], std::move(batch));
    }
    if (++*round < rounds)
      self->send(self, caf::atom("step"));
    else
      self->quit();
  }};
}

struct Options {
  std::uint32_t streams = 256;
  std::uint32_t rounds = 1024;
  std::vector<std::uint32_t> tokens{1, 4, 16};
  std::uint32_t repeat = 3;
  std::uint32_t scheduler_threads = 0;
};

/// CPU seconds of every thread of this process so far.
double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

struct Rate {
  double tokens_per_s = 0;
  /// CPU seconds per token over all threads.
  double cpu_per_token = 0;
};

Rate run_once(const Options& options, std::uint32_t tokens) {
  caf::actor_system_config config;
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
  if (options.scheduler_threads > 0)
    config.set("scheduler.max-threads", std::size_t{options.scheduler_threads});
  caf::actor_system system{config};
  auto counts = std::make_shared<Counts>();
  counts->streams = options.streams;
  counts->tokens_per_sink = std::uint64_t{options.rounds} * tokens;
  auto finished = counts->done.get_future();
  std::vector<caf::actor> relays;
  for (std::uint32_t i = 0; i < options.streams; ++i)
    relays.push_back(system.spawn(relay, system.spawn(counting_sink, counts)));
  const double cpu_start = process_cpu_seconds();
  const auto start = Clock::now();
  system.spawn<caf::detached>(producer, std::move(relays), options.rounds, tokens);
  const double seconds = std::chrono::duration<double>(finished.get() - start).count();
  const double cpu = process_cpu_seconds() - cpu_start;
  const double total = double(counts->tokens.load());
  return Rate{total / seconds, cpu / total};
}

} // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"CAF's per-message cost on caflm's token path (producer -> relay -> sink)"};
  app.add_option("--streams", options.streams, "Relay/sink pairs")->capture_default_str();
  app.add_option("--rounds", options.rounds, "Batches per stream")->capture_default_str();
  app.add_option("--tokens", options.tokens, "Tokens per chunk (repeatable)")
      ->capture_default_str();
  app.add_option("--repeat", options.repeat, "Runs per size")->capture_default_str();
  app.add_option("--scheduler-threads", options.scheduler_threads,
                 "CAF scheduler threads (0: CAF's default)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  for (std::uint32_t tokens : options.tokens) {
    std::vector<double> rates;
    std::vector<double> cpu;
    for (std::uint32_t i = 0; i < options.repeat; ++i) {
      const Rate rate = run_once(options, tokens);
      rates.push_back(rate.tokens_per_s);
      cpu.push_back(rate.cpu_per_token);
    }
    std::sort(rates.begin(), rates.end());
    std::sort(cpu.begin(), cpu.end());
    const double median = rates[rates.size() / 2];
    // Two messages per chunk: producer -> relay, relay -> sink.
    const double messages = 2.0 * median / tokens;
    const double cpu_per_message = cpu[cpu.size() / 2] * tokens / 2.0;
    std::printf("%2u tokens/chunk: %.0f tokens/s median [%.0f .. %.0f] = %.0f msgs/s; "
                "CPU %.3f us/msg [%.3f .. %.3f] (all threads)\n",
                tokens, median, rates.front(), rates.back(), messages, 1e6 * cpu_per_message,
                1e6 * cpu.front() * tokens / 2.0, 1e6 * cpu.back() * tokens / 2.0);
  }
  return 0;
}
