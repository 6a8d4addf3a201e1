#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "caflm/actors/tls_options.hpp"
#include "caflm/engine/engine_options.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/sampling/sampling_params.hpp"

// Checks of command-line values shared by the caflm subcommands.

namespace caflm::apps {

/// A check for counts and sizes that must be at least 1.
CLI::Validator at_least_one();

/// `mib` MiB in bytes; std::invalid_argument naming `option` when that
/// overflows.
std::size_t mebibytes(std::uint64_t mib, const char* option);

/// Throws std::runtime_error saying so when `port` on `host` is taken (or
/// `host` is no address of this machine). Port 0 always passes.
void check_port_free(const std::string& host, std::uint16_t port);

/// Adds `--token-flush-us`: how long an engine's worker may hold tokens so
/// that several steps travel in one message (EngineLimits::
/// token_flush_interval), written to `interval`.
void add_token_flush_option(CLI::App& cmd, std::chrono::microseconds& interval);

/// Lets the process open as many files as its hard limit allows, not the
/// usual soft 1024: every HTTP connection holds a socket.
void raise_open_file_limit();

/// Adds `--log-level` to `app`: what the operator log says, on standard
/// error (debug, info, warning, error, off).
void add_log_level_option(CLI::App& app);

/// Adds `--chat-template NAME` to `cmd`: a built-in chat template to use
/// instead of the model's; its help lists the names.
void add_chat_template_option(CLI::App& cmd, std::string& name);

/// Adds the sampling options (--max-tokens described as `max_tokens_help`,
/// --temperature, --top-k, --top-p, --min-p, the penalties, --seed, --stop,
/// --ignore-eos) to `cmd`, filling `params`, which must outlive the parse.
void add_sampling_options(CLI::App& cmd, SamplingParams& params,
                          const std::string& max_tokens_help);

/// Adds `--device cuda|cpu|auto` and `--gpu-memory` to `cmd`, filling
/// `device` and `gpu_memory` (which must outlive the parse). The default is
/// auto: CUDA when a device is usable, else the CPU (said once).
void add_device_options(CLI::App& cmd, Device& device, GpuMemory& gpu_memory);

/// Adds `--kv-cache-type auto|f32|f16` to `cmd`, filling `type` (which must
/// outlive the parse); auto, the default, leaves it unset: the model's
/// (auto_kv_cache_type).
void add_kv_cache_type_option(CLI::App& cmd, std::optional<KvCacheType>& type);

/// Adds `--tls-cert`, `--tls-key` and `--tls-ca` to `cmd`: the node's
/// certificate and key and the cluster's CA for mutual TLS with other caflm
/// nodes (see `caflm certs`), written to `tls`, which must outlive the parse.
void add_tls_options(CLI::App& cmd, TlsOptions& tls);

/// Adds the bounds on what one request may ask of an engine (RequestLimits)
/// to `cmd`, in their own help group: `--max-prompt-bytes`,
/// `--max-prompt-tokens`, `--max-tokens-limit`, `--max-stop-strings`,
/// `--max-stop-bytes` and `--request-lifetime`, written to `limits`, which
/// must outlive the parse.
void add_request_limit_options(CLI::App& cmd, RequestLimits& limits);

/// Sets the log level unless `--log-level` chose one.
void default_log_level(LogLevel level);

} // namespace caflm::apps
