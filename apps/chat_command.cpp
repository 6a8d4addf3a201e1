// `caflm chat`: an interactive chat with a model in the terminal.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/all.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/actors/cluster.hpp"
#include "caflm/engine/request_limits.hpp"
#include "caflm/model/model.hpp"
#include "caflm/text/chat_prompt.hpp"
#include "caflm/text/chat_template.hpp"
#include "caflm/text/tokenizer.hpp"

namespace caflm::apps {

namespace {

struct ChatOptions {
  std::string model;
  std::string system;
  std::string chat_template;
  std::uint64_t kv_cache_mb = 1024;
  Device device = Device::Auto;
  GpuMemory gpu_memory;
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  std::uint32_t max_context = 0;
  bool show_prompt = false;
  SamplingParams params;
};

/// Set by SIGINT while an answer streams; the chat loop cancels it.
std::atomic<bool> interrupted{false};
/// Whether an answer is streaming (else SIGINT only reminds how to leave).
std::atomic<bool> answering{false};

extern "C" void on_interrupt(int) {
  if (answering.load()) {
    interrupted.store(true);
    return;
  }
  static const char hint[] = "\n(Ctrl-D leaves)\n> ";
  // write() is async-signal-safe; its result changes nothing here.
  [[maybe_unused]] ssize_t written = ::write(STDOUT_FILENO, hint, sizeof hint - 1);
}

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  // Reading the next line resumes after the hint.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
}

/// Reads one message: a line, or several joined where a line ends with a
/// backslash. Nullopt at the end of input (Ctrl-D).
std::optional<std::string> read_message() {
  std::string message;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    return message + line;
  }
  if (!message.empty())
    return message;
  return std::nullopt;
}

/// Leaves out the oldest exchange (a user message and the answers after it)
/// of `history`, keeping the system prompt and the last message; false when
/// there is none to leave out.
bool drop_oldest_exchange(std::vector<ChatMessage>& history) {
  auto first = std::find_if(history.begin(), history.end(),
                            [](const ChatMessage& m) { return m.role != "system"; });
  if (first == history.end() || first + 1 >= history.end())
    return false;
  // The exchange ends where the next user message starts.
  auto next = std::find_if(first + 1, history.end() - 1,
                           [](const ChatMessage& m) { return m.role == "user"; });
  history.erase(first, next);
  return true;
}

/// Streams one answer to stdout; Ctrl-C cancels it. Returns what was
/// generated (the partial answer when cancelled).
GenerationResult stream_answer(caf::actor_system& system, Cluster& cluster,
                               std::vector<TokenId> prompt, const SamplingParams& params,
                               std::uint64_t id) {
  GenerateRequest request;
  request.id = id;
  request.prompt_tokens = std::move(prompt);
  request.params = params;
  auto done = std::make_shared<std::promise<GenerationResult>>();
  std::future<GenerationResult> result = done->get_future();
  token_sink sink = spawn_collector(
      system, id, [done](GenerationResult&& r) { done->set_value(std::move(r)); },
      [](const TokenChunk& chunk) {
        std::fputs(chunk.text.c_str(), stdout);
        std::fflush(stdout);
      });
  interrupted.store(false);
  answering.store(true);
  request_actor running = cluster.submit(std::move(request), sink);
  bool cancelled = false;
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (interrupted.load() && !cancelled) {
      caf::anon_send(running, cancel_atom::value);
      cancelled = true;
    }
  }
  answering.store(false);
  std::printf("\n");
  return result.get();
}

void run_chat(const ChatOptions& options, caf::actor_system& system) {
  if (auto problem = validate(options.params))
    throw std::invalid_argument(*problem);
  std::shared_ptr<const Model> model = Model::load(options.model);
  const ChatTemplate chat_template =
      options.chat_template.empty() ? ChatTemplate::from_gguf(model->file())
                                    : ChatTemplate::builtin(options.chat_template, model->file());
  ClusterOptions cluster_options;
  cluster_options.kv_cache_bytes = mebibytes(options.kv_cache_mb, "--kv-cache-mb");
  cluster_options.kv_cache_type = options.kv_cache_type;
  cluster_options.max_context = options.max_context;
  cluster_options.device = options.device;
  cluster_options.gpu_memory = options.gpu_memory;
  Cluster cluster{system, model, cluster_options};
  const Tokenizer& tokenizer = *cluster.tokenizer();

  std::vector<ChatMessage> history;
  if (!options.system.empty())
    history.push_back({"system", options.system});
  install_interrupt_handler();
  for (std::uint64_t turn = 1;; ++turn) {
    std::printf("> ");
    std::fflush(stdout);
    std::optional<std::string> message = read_message();
    if (!message)
      break;
    if (message->empty())
      continue;
    history.push_back({"user", *message});
    GenerationResult answer;
    for (;;) {
      const std::string rendered = chat_template.render(history, /*add_generation_prompt=*/true);
      if (options.show_prompt)
        std::fprintf(stderr, "%s", rendered.c_str());
      answer = stream_answer(system, cluster, encode_chat_prompt(tokenizer, rendered),
                             options.params, turn);
      if (answer.ok || answer.error.code != InferenceErrorCode::context_length_exceeded ||
          !drop_oldest_exchange(history))
        break;
      std::fprintf(stderr, "caflm: the conversation outgrew the context; its oldest exchange "
                           "is left out\n");
    }
    const bool stopped = !answer.ok && answer.error.code == InferenceErrorCode::cancelled;
    if (!answer.ok && !stopped) {
      // The question stays unanswered; the user may ask again.
      std::fprintf(stderr, "caflm: %s: %s\n", to_string(answer.error.code),
                   answer.error.message.c_str());
      history.pop_back();
      continue;
    }
    // A stopped answer stays in the history as far as it got, as in a
    // chat window.
    history.push_back({"assistant", answer.text});
  }
  std::printf("\n");
}

} // namespace

void add_chat_command(CLI::App& app) {
  auto options = std::make_shared<ChatOptions>();
  SamplingParams& p = options->params;
  p.temperature = 0.8f;
  // As llama.cpp's chat: an answer ends at end-of-turn, Ctrl-C or a full
  // context. A fixed count would be refused by engines of a smaller context.
  p.max_tokens = kMaxTokensUntilContextFull;
  CLI::App* cmd = app.add_subcommand(
      "chat", "Chat with a model in the terminal (Ctrl-C stops an answer, Ctrl-D leaves)");
  cmd->add_option("--model", options->model, "GGUF model file")->required();
  cmd->add_option("--system", options->system, "System prompt");
  add_chat_template_option(*cmd, options->chat_template);
  cmd->add_flag("--show-prompt", options->show_prompt,
                "Print each rendered prompt on standard error");
  add_device_options(*cmd, options->device, options->gpu_memory);
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_option("--kv-cache-mb", options->kv_cache_mb, "KV cache, MiB")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-context", options->max_context, "Longest conversation (0: the model's)")
      ->capture_default_str();
  add_sampling_options(*cmd, p, "Tokens per answer at most (default: until the context is full)");
  cmd->callback([options] {
    run_in_actor_system([&](caf::actor_system& system) { run_chat(*options, system); });
  });
}

} // namespace caflm::apps
