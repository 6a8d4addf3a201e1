#include "apps/options.hpp"

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <netdb.h>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "caflm/engine/log.hpp"
#include "caflm/text/chat_template.hpp"

namespace caflm::apps {

CLI::Validator at_least_one() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.find_first_not_of("0123456789") != std::string::npos ||
            value.find_first_not_of('0') == std::string::npos)
          return "must be a whole number of at least 1, not " + value;
        return {};
      },
      "AT LEAST 1");
}

std::size_t mebibytes(std::uint64_t mib, const char* option) {
  if (mib > (std::numeric_limits<std::size_t>::max() >> 20))
    throw std::invalid_argument(std::string(option) + " " + std::to_string(mib) +
                                " is more bytes than this machine can address");
  return static_cast<std::size_t>(mib) << 20;
}

void add_token_flush_option(CLI::App& cmd, std::chrono::microseconds& interval) {
  cmd.add_option_function<std::uint32_t>(
         "--token-flush-us",
         [&interval](const std::uint32_t& microseconds) {
           interval = std::chrono::microseconds(microseconds);
         },
         "Microseconds a worker may hold tokens so that several steps go in one message (0: every "
         "step at once). A step slower than this always sends; a request's first and last "
         "tokens never wait")
      ->default_str(std::to_string(interval.count()));
}

void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

void check_port_free(const std::string& host, std::uint16_t port) {
  if (port == 0)
    return;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port);
  if (int failed = getaddrinfo(host.c_str(), service.c_str(), &hints, &addresses); failed != 0)
    throw std::runtime_error("cannot listen on " + host + ": " + gai_strerror(failed));
  std::string problem;
  for (addrinfo* a = addresses; a != nullptr && problem.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    // As the middleman binds: address reuse on, so only a live listener fails.
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0)
      problem = errno == EADDRINUSE ? "port " + service + " is already in use"
                                    : std::string(std::strerror(errno));
    close(fd);
  }
  freeaddrinfo(addresses);
  if (!problem.empty())
    throw std::runtime_error("cannot listen on " + host + ":" + service + ": " + problem);
}

namespace {

bool log_level_chosen = false;

} // namespace

void default_log_level(LogLevel level) {
  if (!log_level_chosen)
    set_log_level(level);
}

void add_log_level_option(CLI::App& app) {
  static const std::map<std::string, LogLevel> levels{{"debug", LogLevel::Debug},
                                                      {"info", LogLevel::Info},
                                                      {"warning", LogLevel::Warning},
                                                      {"error", LogLevel::Error},
                                                      {"off", LogLevel::Off}};
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& name) {
           set_log_level(levels.at(name));
           log_level_chosen = true;
         },
         "What the operator log says on standard error: debug, info, warning (default), error "
         "or off")
      ->check(CLI::IsMember({"debug", "info", "warning", "error", "off"}));
}

void add_chat_template_option(CLI::App& cmd, std::string& name) {
  std::string names;
  for (const std::string& builtin : ChatTemplate::builtin_names())
    names += (names.empty() ? "" : ", ") + builtin;
  cmd.add_option("--chat-template", name,
                 "Use this built-in chat template instead of the model's: " + names);
}

void add_sampling_options(CLI::App& cmd, SamplingParams& p, const std::string& max_tokens_help) {
  cmd.add_option("--max-tokens", p.max_tokens, max_tokens_help)
      ->check(at_least_one())
      ->capture_default_str();
  cmd.add_option("--temperature", p.temperature, "0 for greedy")->capture_default_str();
  cmd.add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: all)");
  cmd.add_option("--top-p", p.top_p, "Nucleus sampling threshold");
  cmd.add_option("--min-p", p.min_p, "Drop tokens below min-p times the best probability");
  cmd.add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1: off)");
  cmd.add_option("--presence-penalty", p.presence_penalty, "Presence penalty");
  cmd.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty");
  cmd.add_option_function<std::uint64_t>(
      "--seed", [&p](std::uint64_t seed) { p.seed = seed; },
      "Sampling seed (default: a random one)");
  cmd.add_option("--stop", p.stop, "Stop string (repeatable); it is not printed");
  cmd.add_flag("--ignore-eos", p.ignore_eos, "Never stop at end-of-sequence");
}

void add_request_limit_options(CLI::App& cmd, RequestLimits& limits) {
  const std::string group = "Request limits (each engine refuses a request beyond them, naming "
                            "the limit)";
  cmd.add_option("--max-prompt-bytes", limits.max_prompt_bytes,
                 "Bytes of a text prompt, before it is tokenized")
      ->check(at_least_one())
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--max-prompt-tokens", limits.max_prompt_tokens,
                 "Tokens of a prompt (0: only the context bounds it)")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--max-tokens-limit", limits.max_tokens,
                 "The most max_tokens a request may ask for (0: the context)")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--max-stop-strings", limits.max_stop_strings, "Stop strings of one request")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--max-stop-bytes", limits.max_stop_bytes, "Bytes of one stop string")
      ->capture_default_str()
      ->group(group);
  cmd.add_option_function<std::uint32_t>(
         "--request-lifetime",
         [&limits](const std::uint32_t& seconds) {
           limits.max_lifetime = std::chrono::seconds(seconds);
         },
         "Seconds from a request's arrival at an engine after which the engine ends it (0: "
         "never)")
      ->default_str(std::to_string(limits.max_lifetime.count()))
      ->group(group);
}

void add_device_options(CLI::App& cmd, Device& device, GpuMemory& gpu_memory) {
  device = Device::Auto;
  cmd.add_option_function<std::string>(
         "--device",
         [&device](const std::string& name) {
           auto parsed = parse_device(name);
           if (!parsed)
             throw CLI::ValidationError("--device", "expected cuda, cpu or auto, not " + name);
           device = *parsed;
         },
         "Where local engines run: cuda, cpu, or auto (CUDA when a device is usable)")
      ->default_str("auto");
  cmd.add_option_function<std::string>(
         "--gpu-memory",
         [&gpu_memory](const std::string& text) {
           try {
             gpu_memory = parse_gpu_memory(text);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError(e.what());
           }
         },
         "GPU memory a CUDA engine takes (weights, then KV cache): a fraction of the device's "
         "memory in (0, 1], or MiB")
      ->default_str("0.9");
}

void add_kv_cache_type_option(CLI::App& cmd, std::optional<KvCacheType>& type) {
  type.reset();
  cmd.add_option_function<std::string>(
         "--kv-cache-type",
         [&type](const std::string& name) {
           if (name == "auto") {
             type.reset();
             return;
           }
           auto parsed = parse_kv_cache_type(name);
           if (!parsed)
             throw CLI::ValidationError("--kv-cache-type",
                                        "expected auto, f32 or f16, not " + name);
           type = *parsed;
         },
         "Element type of a CPU engine's KV cache: f32 (log-probabilities as llama.cpp's with an "
         "f32 cache), f16 (twice the tokens per MiB, faster attention; llama.cpp's default) or "
         "auto (f32 for a model whose matrices are all f32, else f16)")
      ->default_str("auto");
}

void add_tls_options(CLI::App& cmd, TlsOptions& tls) {
  cmd.add_option("--tls-cert", tls.certificate,
                 "This node's certificate (PEM), signed by the cluster's CA: links to other caflm "
                 "nodes then use mutual TLS")
      ->check(CLI::ExistingFile);
  cmd.add_option("--tls-key", tls.key, "This node's private key (PEM, unencrypted)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--tls-ca", tls.ca,
                 "The cluster's CA certificate (PEM): peers must present a "
                 "certificate it signed")
      ->check(CLI::ExistingFile);
}

} // namespace caflm::apps
