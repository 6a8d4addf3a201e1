// Embeds caflm in a CAF program: two local replicas of a model behind a
// coordinator, one blocking request and one streamed to an actor of ours.
//
//   embedding MODEL.gguf
#include <cstdio>
#include <string>

#include <caf/all.hpp>

#include <caflm/actors/cluster.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  caf::actor_system_config cfg;
  caflm::add_message_types(cfg); // every type that crosses the network
  caf::actor_system sys{cfg};

  caflm::ClusterOptions options;
  options.model_path = argv[1];
  options.replicas = 2; // local engines; options.workers adds `caflm worker`s
  caflm::Cluster cluster{sys, options};

  // A blocking call.
  caflm::GenerateRequest request;
  request.prompt = "Once upon a time";
  request.params.max_tokens = 16;
  request.params.temperature = 0.0f;
  caflm::GenerationResult result = cluster.generate(request);
  if (!result.ok) {
    std::fprintf(stderr, "failed: %s\n", result.error.message.c_str());
    return 1;
  }
  std::printf("generated %zu tokens (%s): %s\n", result.tokens.size(),
              caflm::to_string(result.finish), result.text.c_str());

  // The same request streamed to an actor of ours: each TokenBatch as it
  // arrives, then the last chunk's finish reason.
  std::size_t streamed = 0;
  caf::scoped_actor self{sys};
  cluster.submit(request, caf::actor_cast<caflm::token_sink>(self));
  bool done = false;
  bool failed = false;
  self->receive_while([&] { return !done; })(
      [&](const caflm::TokenBatch& batch) {
        for (const caflm::TokenChunk& chunk : batch.chunks) {
          streamed += chunk.tokens.size();
          done = done || chunk.finish != caflm::FinishReason::None;
        }
      },
      [&](const caflm::InferenceError& error) {
        std::fprintf(stderr, "failed: %s\n", error.message.c_str());
        done = failed = true;
      });
  std::printf("streamed %zu tokens\n", streamed);
  // Greedy decoding is deterministic: both runs produce the same tokens.
  return failed || streamed != result.tokens.size() ? 1 : 0;
}
