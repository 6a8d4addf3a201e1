// The `caflm` command: generate, chat, tokenize, template, inspect, bench,
// make-test-model, worker and bench-serve.
#include <cstdio>
#include <exception>

#include "apps/commands.hpp"
#include "apps/options.hpp"

int main(int argc, char** argv) {
  CLI::App app{"caflm: LLM inference on the C++ Actor Framework"};
  app.require_subcommand(1);
  caflm::apps::add_log_level_option(app);
  // Options of the main command may follow a subcommand's name too.
  app.fallthrough();
  caflm::apps::add_generate_command(app);
  caflm::apps::add_tokenize_command(app);
  caflm::apps::add_template_command(app);
  caflm::apps::add_make_test_model_command(app);
  caflm::apps::add_bench_command(app);
  caflm::apps::add_worker_command(app);
  caflm::apps::add_inspect_command(app);
  caflm::apps::add_chat_command(app);
  caflm::apps::add_serve_command(app);
  caflm::apps::add_bench_serve_command(app);
  caflm::apps::add_certs_command(app);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caflm: %s\n", e.what());
    return 1;
  }
  return 0;
}
