#pragma once

#include <CLI/CLI.hpp>

namespace caflm::apps {

/// Each `add_*_command` registers one subcommand of `caflm` and its action.
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_make_test_model_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_worker_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_bench_serve_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_certs_command(CLI::App& app);

} // namespace caflm::apps
