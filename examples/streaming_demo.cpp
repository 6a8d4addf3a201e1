// Streaming from one engine, told top to bottom.
//
// A Cluster with a single local replica runs one request. Each chunk's text
// is printed the moment it arrives (a ChunkObserver sees every chunk on the
// collector's thread); at the end come the finish reason and token counts.
//
//   streaming_demo [--model FILE] [--prompt TEXT]
//
// --model: a GGUF model (default: a small random one written to the temp
//          folder; its text is gibberish, but it streams all the same).
#include <cstdio>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"
#include "examples/demo_model.hpp"

using namespace caflm;

namespace {

int demo(const std::string& model_path, const std::string& prompt) {
  caf::actor_system_config config;
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system system{config};

  ClusterOptions options;
  options.replicas = 1;
  options.kv_cache_bytes = std::size_t{64} << 20; // plenty for one request
  Cluster cluster{system, load_demo_model(model_path, "caflm-streaming-demo.gguf"), options};

  GenerateRequest request;
  request.id = 1;
  request.prompt = prompt;
  request.params.max_tokens = 48;
  request.params.temperature = 0.8f;
  request.params.seed = 7;
  // A random model samples its end-of-text token early and at random; a
  // real one stops when it is done.
  request.params.ignore_eos = model_path.empty();

  std::printf("%s", prompt.c_str());
  auto print_chunk = [](const TokenChunk& chunk) {
    std::fwrite(chunk.text.data(), 1, chunk.text.size(), stdout);
    std::fflush(stdout);
  };
  GenerationResult result = cluster.generate_async(request, print_chunk).get();
  std::printf("\n\n");
  if (!result.ok) {
    std::fprintf(stderr, "the request failed: %s\n", result.error.message.c_str());
    return 1;
  }
  std::printf("finish: %s\n", to_string(result.finish));
  std::printf("tokens: %u in the prompt (%u from the prefix cache), %u generated\n",
              result.usage.prompt_tokens, result.usage.cached_prompt_tokens,
              result.usage.completion_tokens);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string model_path;
  std::string prompt = "Once upon a time";
  for (int i = 1; i < argc; i += 2) {
    const std::string option = argv[i];
    if (i + 1 < argc && option == "--model") {
      model_path = argv[i + 1];
    } else if (i + 1 < argc && option == "--prompt") {
      prompt = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--model FILE] [--prompt TEXT]\n", argv[0]);
      return 1;
    }
  }
  try {
    return demo(model_path, prompt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streaming_demo: %s\n", e.what());
    return 1;
  }
}
