// Two replicas behind one coordinator, told top to bottom.
//
// A Cluster runs two local replicas of one model, each with its own worker
// thread and KV cache. Eight requests are submitted at once; the
// coordinator spreads them by load (4 * waiting + running, counting what it
// routed since its last poll). Each request's result is printed in
// submission order, then the coordinator's view of its engines.
//
//   two_replica_demo [--model FILE]
//
// --model: a GGUF model (default: a small random one written to the temp
//          folder; its text is gibberish).
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"
#include "examples/demo_model.hpp"

using namespace caflm;

namespace {

constexpr std::uint64_t kRequests = 8;

int demo(const std::string& model_path) {
  caf::actor_system_config config;
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system system{config};

  ClusterOptions options;
  options.replicas = 2;
  options.kv_cache_bytes = std::size_t{64} << 20; // plenty for short requests
  Cluster cluster{system, load_demo_model(model_path, "caflm-two-replica-demo.gguf"), options};

  // Requests share one of two system prompts, whose KV blocks an engine's
  // prefix cache can reuse.
  const std::string prefixes[] = {"You answer questions about the sea. ",
                                  "You answer questions about mountains. "};
  std::vector<std::future<GenerationResult>> results;
  for (std::uint64_t id = 1; id <= kRequests; ++id) {
    GenerateRequest request;
    request.id = id;
    request.prompt = prefixes[id % 2] + "Question " + std::to_string(id) + ":";
    request.params.max_tokens = 8 + 4 * static_cast<std::uint32_t>(id);
    request.params.temperature = 0.7f;
    request.params.seed = id;
    results.push_back(cluster.generate_async(std::move(request)));
  }

  int failed = 0;
  for (auto& future : results) {
    GenerationResult result = future.get();
    if (result.ok) {
      std::printf("request %llu: %s after %u tokens\n", static_cast<unsigned long long>(result.id),
                  to_string(result.finish), result.usage.completion_tokens);
    } else {
      std::printf("request %llu failed: %s\n", static_cast<unsigned long long>(result.id),
                  result.error.message.c_str());
      ++failed;
    }
  }

  // The coordinator's statistics. Its loads are as of its last poll: wait
  // for a fresh one, taken after every request finished.
  std::this_thread::sleep_for(2 * options.coordinator.poll_interval);
  caf::scoped_actor self{system};
  self->request(cluster.coordinator(), caf::infinite, stats_atom::value)
      .receive(
          [](const CoordinatorStats& stats) {
            std::printf("\ncoordinator: %u engines, %llu requests routed\n", stats.engines,
                        static_cast<unsigned long long>(stats.routed));
            for (std::size_t i = 0; i < stats.loads.size(); ++i) {
              const LoadReport& load = stats.loads[i];
              std::printf("  engine %zu: %u running, %u waiting, %u of %u KV blocks free, "
                          "prefix hit rate %.2f\n",
                          i, load.running, load.waiting, load.free_blocks, load.total_blocks,
                          load.prefix_hit_rate);
            }
          },
          [&](const caf::error& error) {
            std::fprintf(stderr, "no statistics: %s\n", system.render(error).c_str());
            ++failed;
          });
  return failed == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  std::string model_path;
  for (int i = 1; i < argc; i += 2) {
    const std::string option = argv[i];
    if (i + 1 < argc && option == "--model") {
      model_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--model FILE]\n", argv[0]);
      return 1;
    }
  }
  try {
    return demo(model_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "two_replica_demo: %s\n", e.what());
    return 1;
  }
}
