#include "caflm/server/openai_server.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/server/cluster_monitor.hpp"
#include "caflm/server/openai_protocol.hpp"
#include "caflm/server/web_console.hpp"
#include "caflm/text/chat_prompt.hpp"

namespace caflm::server {

namespace {

using clock = std::chrono::steady_clock;

double seconds_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The status and error object of an engine's refusal or failure.
ApiError api_error_of(const InferenceError& error) {
  switch (error.code) {
  case InferenceErrorCode::backpressure:
    return rate_limit_exceeded("every engine's queue is full: " + error.message);
  case InferenceErrorCode::bad_request:
    return invalid_request(error.message);
  case InferenceErrorCode::context_length_exceeded:
    return invalid_request(error.message, "messages", "context_length_exceeded");
  case InferenceErrorCode::engine_unavailable:
    return service_unavailable(error.message);
  case InferenceErrorCode::deadline_exceeded:
    return ApiError(504, error.message, "timeout_error", {}, "deadline_exceeded");
  default:
    return internal_error(error.message);
  }
}

/// Metrics' reason for a request turned away with `error`.
const char* rejection_reason(const ApiError& error) {
  switch (error.status) {
  case 401:
    return "unauthorized";
  case 404:
    return "not_found";
  case 429:
    return "queue_full";
  case 503:
    return "unavailable";
  default:
    return error.status < 500 ? "invalid" : "error";
  }
}

void send_error(ResponseWriter& writer, const ApiError& error, std::chrono::seconds retry_after) {
  HttpHeaders headers;
  if (error.status == 429)
    headers.emplace_back("Retry-After", std::to_string(retry_after.count()));
  writer.respond(error.status, "application/json", dump_json(error_body(error)),
                 std::move(headers));
}

enum class Endpoint { Chat, Completion };

/// One choice of a request: one prompt, one request actor.
struct Choice {
  std::uint32_t index = 0;
  std::vector<TokenId> prompt;
  SamplingParams params;
  /// The prompt's text, when echoed (completions' `echo`).
  std::string echo;
  request_actor actor;
  bool done = false;
  bool saw_token = false;
  std::uint32_t attempt = 0;
  /// The engines that streamed this choice, in order (several when it
  /// failed over), and the actor id of the last one.
  std::vector<std::string> engines;
  std::uint64_t engine_actor_id = 0;
  clock::time_point last_token;
  FinishReason finish = FinishReason::None;
  Usage usage;
  std::string text;
  std::vector<TokenInfo> tokens;
};

} // namespace

struct OpenAiServer::Shared {
  Shared(caf::actor_system& system, Cluster& cluster, std::shared_ptr<const Tokenizer> tokenizer,
         std::optional<ChatTemplate> chat_template, OpenAiServerOptions options)
    : system(system)
    , cluster(cluster)
    , tokenizer(std::move(tokenizer))
    , chat_template(std::move(chat_template))
    , options(std::move(options)) {}

  caf::actor_system& system;
  Cluster& cluster;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  OpenAiServerOptions options;
  std::shared_ptr<ServingMetrics> metrics;
  /// What the web console shows.
  std::shared_ptr<RecentActivity> activity = std::make_shared<RecentActivity>();
  std::shared_ptr<ClusterEventLog> events = std::make_shared<ClusterEventLog>();
  std::shared_ptr<ClusterView> view;
  std::atomic<std::uint64_t> next_id{1};

  /// Counts a request turned away with `error` where the console and the
  /// metrics see it.
  void rejected(const ApiError& error) {
    metrics->request_rejected(rejection_reason(error));
    if (error.status == 429) {
      activity->request_rejected(unix_seconds_now());
      view->note_rate_limited();
    }
  }
};

namespace {

/// One HTTP request's generation: every choice, the client's writer, and
/// what was sent so far. Chunks and ends of different choices arrive on
/// different threads; one mutex orders them.
class Generation : public std::enable_shared_from_this<Generation> {
 public:
  Generation(std::shared_ptr<OpenAiServer::Shared> shared, std::shared_ptr<ResponseWriter> writer,
             Endpoint endpoint, const ParsedCommon& request, std::vector<Choice> choices)
    : shared_(std::move(shared))
    , writer_(std::move(writer))
    , endpoint_(endpoint)
    , stream_(request.stream)
    , logprobs_(request.logprobs)
    , top_logprobs_(request.sampling.top_logprobs)
    , choices_(std::move(choices))
    , started_(clock::now()) {
    meta_.id = new_response_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-");
    meta_.created = unix_time_now();
    meta_.model = shared_->options.served_model_name;
    meta_.include_usage = request.stream && request.include_usage;
  }

  /// Submits every choice; a client that leaves cancels them all.
  void start() {
    auto self = shared_from_this();
    std::lock_guard<std::mutex> guard(mutex_);
    // Choices of one prompt form a prefill group: one engine computes the
    // prompt once and forks it for each.
    std::vector<std::uint64_t> groups(choices_.size(), 0);
    for (std::size_t c = 0; c < choices_.size(); ++c)
      for (std::size_t earlier = 0; earlier < c && groups[c] == 0; ++earlier)
        if (choices_[earlier].prompt == choices_[c].prompt) {
          if (groups[earlier] == 0)
            groups[earlier] = shared_->next_id.fetch_add(1);
          groups[c] = groups[earlier];
        }
    for (std::size_t c = 0; c < choices_.size(); ++c) {
      Choice& choice = choices_[c];
      GenerateRequest request;
      request.id = shared_->next_id.fetch_add(1);
      request.prompt_tokens = choice.prompt;
      request.params = choice.params;
      request.prefill_group = groups[c];
      shared_->metrics->request_started();
      shared_->activity->request_started(unix_seconds_now());
      token_sink sink = spawn_collector(
          shared_->system, request.id,
          [self, c](GenerationResult&& result) { self->on_done(c, std::move(result)); },
          [self, c](const TokenChunk& chunk) { self->on_chunk(c, chunk); });
      choice.actor = shared_->cluster.submit(std::move(request), sink);
    }
    writer_->on_close([self] { self->on_client_gone(); });
  }

 private:
  void on_client_gone() {
    std::lock_guard<std::mutex> guard(mutex_);
    client_gone_ = true;
    // Its stream ended with it, whatever the choices still do.
    count_stream_closed();
    cancel_all();
  }

  /// Counts the event stream as closed, once (mutex held).
  void count_stream_closed() {
    if (!streaming_ || stream_counted_closed_)
      return;
    stream_counted_closed_ = true;
    shared_->metrics->stream_closed();
  }

  /// Cancels every choice still running (mutex held).
  void cancel_all() {
    for (Choice& choice : choices_)
      if (!choice.done && choice.actor)
        caf::anon_send(choice.actor, cancel_atom::value);
  }

  std::vector<TokenInfo> token_infos(const TokenChunk& chunk) const {
    std::vector<TokenInfo> infos;
    const Tokenizer& tokenizer = *shared_->tokenizer;
    for (std::size_t t = 0; t < chunk.tokens.size(); ++t) {
      TokenInfo info;
      info.text = tokenizer.token_to_piece(chunk.tokens[t]);
      info.logprob = t < chunk.logprobs.size() ? chunk.logprobs[t] : 0.0f;
      if (t < chunk.top_logprobs.size())
        for (const TokenLogprob& top : chunk.top_logprobs[t])
          info.top.push_back(TopLogprob{tokenizer.token_to_piece(top.token), top.logprob});
      infos.push_back(std::move(info));
    }
    return infos;
  }

  /// Opens the event stream (mutex held): the role of every chat choice,
  /// and each completion's echoed prompt, come first.
  void open_stream() {
    if (streaming_)
      return;
    streaming_ = true;
    shared_->metrics->stream_opened();
    writer_->start_stream(200, "text/event-stream",
                          {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    for (const Choice& choice : choices_) {
      if (endpoint_ == Endpoint::Chat)
        writer_->write(sse_event(chat_role_chunk(meta_, choice.index)));
      else if (!choice.echo.empty())
        writer_->write(
            sse_event(completion_chunk(meta_, choice.index, choice.echo, nullptr, false)));
    }
  }

  void on_chunk(std::size_t c, const TokenChunk& chunk) {
    std::lock_guard<std::mutex> guard(mutex_);
    Choice& choice = choices_[c];
    const auto now = clock::now();
    if (chunk.attempt > choice.attempt) {
      choice.attempt = chunk.attempt;
      shared_->metrics->failover();
      shared_->activity->failover();
    }
    if (chunk.engine_actor_id != 0 && chunk.engine_actor_id != choice.engine_actor_id)
      on_engine(choice, chunk.engine_actor_id);
    if (!chunk.tokens.empty()) {
      const double unix_now = unix_seconds_now();
      if (!choice.saw_token) {
        choice.saw_token = true;
        const double ttft = seconds_between(started_, now);
        shared_->metrics->first_token(ttft, chunk.queue_seconds >= 0.0f ? chunk.queue_seconds
                                                                        : std::nan(""));
        shared_->activity->first_token(unix_now, ttft);
        if (chunk.tokens.size() > 1)
          shared_->metrics->tokens(chunk.tokens.size() - 1, 0.0);
      } else {
        const double itl = seconds_between(choice.last_token, now) / double(chunk.tokens.size());
        shared_->metrics->tokens(chunk.tokens.size(), itl);
        shared_->activity->inter_token(unix_now, itl, chunk.tokens.size());
      }
      choice.last_token = now;
    }
    if (!stream_ || failed_ || client_gone_)
      return;
    open_stream();
    const std::vector<TokenInfo> infos = logprobs_ ? token_infos(chunk) : std::vector<TokenInfo>{};
    if (chunk.text.empty() && infos.empty())
      return;
    if (endpoint_ == Endpoint::Chat) {
      writer_->write(sse_event(
          chat_content_chunk(meta_, choice.index, chunk.text, logprobs_ ? &infos : nullptr)));
    } else {
      writer_->write(sse_event(completion_chunk(
          meta_, choice.index, chunk.text, logprobs_ ? &infos : nullptr, top_logprobs_ > 0,
          utf8_length(choice.echo) + utf8_length(choice.text))));
    }
    choice.text += chunk.text;
  }

  /// The choice streams from another engine now (mutex held): a request
  /// that moved is on the cluster's timeline.
  void on_engine(Choice& choice, std::uint64_t engine_actor_id) {
    choice.engine_actor_id = engine_actor_id;
    std::string name = shared_->cluster.engine_name_of(engine_actor_id);
    if (name.empty())
      name = "engine-" + std::to_string(engine_actor_id);
    if (!choice.engines.empty() && choice.engines.back() != name) {
      nlohmann::ordered_json fields;
      fields["request"] = meta_.id;
      fields["choice"] = choice.index;
      fields["from"] = choice.engines.back();
      fields["to"] = name;
      shared_->events->publish(
          unix_seconds_now(), "request_moved",
          "request " + meta_.id + " moved from " + choice.engines.back() + " to " + name, fields);
    }
    choice.engines.push_back(std::move(name));
  }

  void on_done(std::size_t c, GenerationResult&& result) {
    std::lock_guard<std::mutex> guard(mutex_);
    Choice& choice = choices_[c];
    choice.done = true;
    const double e2e = seconds_between(started_, clock::now());
    if (!result.ok) {
      const bool gone = client_gone_ || result.error.code == InferenceErrorCode::cancelled;
      shared_->metrics->request_finished(gone ? "abort" : "error", choice.prompt.size(),
                                         result.tokens.size(), e2e);
      shared_->activity->request_finished(gone);
      if (gone || failed_)
        return finish_if_done();
      failed_ = true;
      cancel_all();
      const ApiError error = api_error_of(result.error);
      if (streaming_) {
        // The status is sent; the client learns of the failure in-band.
        writer_->write(sse_event(error_body(error)));
        writer_->finish();
        count_stream_closed();
      } else {
        shared_->rejected(error);
        send_error(*writer_, error, shared_->options.retry_after);
      }
      return;
    }
    choice.finish = result.finish;
    choice.usage = Usage{result.usage.prompt_tokens, result.usage.completion_tokens,
                         result.usage.cached_prompt_tokens};
    // vLLM's name for a request its client ended is "abort".
    shared_->metrics->request_finished(
        result.finish == FinishReason::Cancelled ? "abort" : to_string(result.finish),
        result.usage.prompt_tokens, result.usage.completion_tokens, e2e);
    shared_->activity->request_finished(true);
    if (failed_ || client_gone_)
      return;
    if (stream_) {
      open_stream();
      // Text held back until the end (a stop string's prefix that was not
      // one) arrives with the last chunk, already streamed; close the choice.
      auto chunk = endpoint_ == Endpoint::Chat
                       ? chat_finish_chunk(meta_, choice.index, result.finish)
                       : completion_chunk(meta_, choice.index, "", nullptr, false,
                                          utf8_length(choice.echo) + utf8_length(choice.text),
                                          result.finish);
      // caflm's extension: which engines served the choice.
      chunk["choices"][0]["engines"] = choice.engines;
      writer_->write(sse_event(chunk));
    } else {
      choice.text = choice.echo + result.text;
      if (logprobs_) {
        TokenChunk all;
        all.tokens = result.tokens;
        all.logprobs = result.logprobs;
        all.top_logprobs = result.top_logprobs;
        choice.tokens = token_infos(all);
      }
    }
    finish_if_done();
  }

  /// Sends the end of the response once every choice ended (mutex held).
  void finish_if_done() {
    for (const Choice& choice : choices_)
      if (!choice.done)
        return;
    if (failed_ || client_gone_ || answered_)
      return;
    answered_ = true;
    Usage usage;
    // Choices of one prompt share it: count it once per prompt, as OpenAI.
    std::vector<std::vector<TokenId>> counted;
    for (const Choice& choice : choices_) {
      usage.completion_tokens += choice.usage.completion_tokens;
      bool seen = false;
      for (const auto& prompt : counted)
        seen = seen || prompt == choice.prompt;
      if (!seen) {
        counted.push_back(choice.prompt);
        usage.prompt_tokens += choice.usage.prompt_tokens;
        usage.cached_tokens += choice.usage.cached_tokens;
      }
    }
    if (stream_) {
      if (meta_.include_usage)
        writer_->write(sse_event(usage_chunk(
            meta_, endpoint_ == Endpoint::Chat ? "chat.completion.chunk" : "text_completion",
            usage)));
      writer_->write(sse_done());
      writer_->finish();
      count_stream_closed();
      return;
    }
    std::vector<ChoiceResult> results;
    for (const Choice& choice : choices_)
      results.push_back(ChoiceResult{choice.index, choice.text, choice.finish, choice.tokens});
    auto body = endpoint_ == Endpoint::Chat
                    ? chat_completion_response(meta_, results, usage, logprobs_)
                    : text_completion_response(meta_, results, usage, logprobs_, top_logprobs_ > 0);
    for (std::size_t c = 0; c < choices_.size(); ++c)
      body["choices"][c]["engines"] = choices_[c].engines;
    writer_->respond(200, "application/json", dump_json(body));
  }

  std::shared_ptr<OpenAiServer::Shared> shared_;
  std::shared_ptr<ResponseWriter> writer_;
  Endpoint endpoint_;
  bool stream_;
  bool logprobs_;
  std::uint32_t top_logprobs_;
  std::vector<Choice> choices_;
  clock::time_point started_;
  ResponseMeta meta_;
  std::mutex mutex_;
  bool streaming_ = false;
  bool failed_ = false;
  bool client_gone_ = false;
  bool stream_counted_closed_ = false;
  bool answered_ = false;
};

/// Throws 401 unless the request carries the key (when one is set).
void check_api_key(const OpenAiServer::Shared& shared, const HttpRequest& request) {
  if (!shared.options.api_key.empty() && !has_bearer_token(request, shared.options.api_key))
    throw invalid_api_key();
}

void check_model(const OpenAiServer::Shared& shared, const std::string& model) {
  if (!model.empty() && model != shared.options.served_model_name)
    throw model_not_found(model);
}

/// Throws 400 when `prompt` and the tokens asked for do not fit.
void check_fits(const OpenAiServer::Shared& shared, std::size_t prompt_tokens,
                const ParsedCommon& request, const char* param) {
  const std::uint64_t context = shared.options.max_context;
  if (prompt_tokens == 0)
    throw invalid_request("the prompt is empty", param);
  if (prompt_tokens >= context)
    throw context_length_exceeded(prompt_tokens, context, param);
  if (request.max_tokens_given && prompt_tokens + request.sampling.max_tokens > context)
    throw invalid_request("the prompt's " + std::to_string(prompt_tokens) + " tokens and " +
                              std::to_string(request.sampling.max_tokens) +
                              " max_tokens exceed the context of " + std::to_string(context),
                          "max_tokens", "context_length_exceeded");
}

/// `n` choices of one prompt, each with its own seed when one was given.
void add_choices(std::vector<Choice>& choices, const std::vector<TokenId>& prompt,
                 const ParsedCommon& request, const std::string& echo) {
  for (std::uint32_t c = 0; c < request.n; ++c) {
    Choice choice;
    choice.index = static_cast<std::uint32_t>(choices.size());
    choice.prompt = prompt;
    choice.params = request.sampling;
    if (choice.params.seed)
      choice.params.seed = *choice.params.seed + c;
    choice.echo = echo;
    choices.push_back(std::move(choice));
  }
}

void handle_chat(const std::shared_ptr<OpenAiServer::Shared>& shared, const HttpRequest& http,
                 const std::shared_ptr<ResponseWriter>& writer) {
  check_api_key(*shared, http);
  ParsedChatRequest request = parse_chat_request(http.body);
  check_model(*shared, request.model);
  if (!shared->chat_template)
    throw invalid_request("the model has no chat template; start caflm serve with "
                          "--chat-template NAME to serve chat completions",
                          "messages");
  std::string rendered;
  try {
    rendered = shared->chat_template->render(request.messages, /*add_generation_prompt=*/true);
  } catch (const std::exception& e) {
    throw invalid_request(std::string("the chat template refused the messages: ") + e.what(),
                          "messages");
  }
  const std::vector<TokenId> prompt = encode_chat_prompt(*shared->tokenizer, rendered);
  check_fits(*shared, prompt.size(), request, "messages");
  std::vector<Choice> choices;
  add_choices(choices, prompt, request, {});
  std::make_shared<Generation>(shared, writer, Endpoint::Chat, request, std::move(choices))
      ->start();
}

void handle_completion(const std::shared_ptr<OpenAiServer::Shared>& shared, const HttpRequest& http,
                       const std::shared_ptr<ResponseWriter>& writer) {
  check_api_key(*shared, http);
  ParsedCompletionRequest request = parse_completion_request(http.body);
  check_model(*shared, request.model);
  const Tokenizer& tokenizer = *shared->tokenizer;
  std::vector<Choice> choices;
  for (std::size_t p = 0; p < request.prompts.size(); ++p) {
    const CompletionPrompt& given = request.prompts[p];
    std::vector<TokenId> prompt = given.is_tokens ? given.tokens
                                                  : tokenizer.tokenize(given.text,
                                                                       /*add_special=*/true,
                                                                       /*parse_special=*/true);
    const std::string param = "prompt";
    for (TokenId token : prompt)
      if (token >= tokenizer.vocabulary().size())
        throw invalid_request("token id " + std::to_string(token) +
                                  " is outside the vocabulary of " +
                                  std::to_string(tokenizer.vocabulary().size()),
                              param);
    check_fits(*shared, prompt.size(), request, param.c_str());
    std::string echo;
    if (request.echo)
      echo = given.is_tokens ? tokenizer.decode(prompt) : given.text;
    add_choices(choices, prompt, request, echo);
  }
  if (choices.size() > kMaxChoices)
    throw invalid_request("prompts times n exceed " + std::to_string(kMaxChoices) + " choices",
                          "n");
  std::make_shared<Generation>(shared, writer, Endpoint::Completion, request, std::move(choices))
      ->start();
}

/// Wraps an endpoint: an ApiError it throws becomes its error response.
HttpHandler guarded(std::shared_ptr<OpenAiServer::Shared> shared,
                    void (*endpoint)(const std::shared_ptr<OpenAiServer::Shared>&,
                                     const HttpRequest&, const std::shared_ptr<ResponseWriter>&)) {
  return [shared, endpoint](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
    try {
      endpoint(shared, request, writer);
    } catch (const ApiError& error) {
      shared->rejected(error);
      send_error(*writer, error, shared->options.retry_after);
    }
  };
}

/// Asks the coordinator for every engine's load, without blocking the
/// caller, and hands the answer (or nothing, when it does not answer) to
/// `then` on an actor's thread.
void with_cluster_state(const std::shared_ptr<OpenAiServer::Shared>& shared,
                        std::function<void(const CoordinatorStats*)> then) {
  dp_coordinator_actor coordinator = shared->cluster.coordinator();
  shared->system.spawn([coordinator, then = std::move(then)](caf::event_based_actor* self) {
    self->request(coordinator, std::chrono::seconds(2), stats_atom::value)
        .then([then](const CoordinatorStats& stats) { then(&stats); },
              [then](const caf::error&) { then(nullptr); });
  });
}

} // namespace

OpenAiServer::OpenAiServer(caf::actor_system& system, Cluster& cluster,
                           std::shared_ptr<const Tokenizer> tokenizer,
                           std::optional<ChatTemplate> chat_template, OpenAiServerOptions options)
  : shared_(std::make_shared<Shared>(system, cluster, std::move(tokenizer),
                                     std::move(chat_template), options))
  , metrics_(std::make_shared<ServingMetrics>(options.served_model_name, options.max_context))
  , http_(options.http) {
  shared_->metrics = metrics_;
  shared_->view = std::make_shared<ClusterView>(engine_identities(cluster), shared_->events,
                                                unix_seconds_now());
  monitor_ = std::make_unique<ClusterMonitor>(system, cluster, shared_->view, shared_->events);
  auto shared = shared_;
  add_web_console(http_, WebConsoleSources{options.served_model_name, options.api_key,
                                           shared_->view, shared_->activity, shared_->events});
  http_.route("POST", "/v1/chat/completions", guarded(shared, &handle_chat));
  http_.route("POST", "/v1/completions", guarded(shared, &handle_completion));
  http_.route("GET", "/v1/models",
              [shared](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
                try {
                  check_api_key(*shared, request);
                  writer->respond(
                      200, "application/json",
                      dump_json(models_list({shared->options.served_model_name}, unix_time_now())));
                } catch (const ApiError& error) {
                  send_error(*writer, error, shared->options.retry_after);
                }
              });
  http_.route("GET", "/health",
              [shared](const HttpRequest&, std::shared_ptr<ResponseWriter> writer) {
                const std::size_t total = shared->cluster.engines().size();
                with_cluster_state(shared, [writer, total](const CoordinatorStats* stats) {
                  if (stats == nullptr) {
                    writer->respond(503, "application/json",
                                    R"({"status":"unavailable","reason":"the coordinator )"
                                    R"(does not answer"})");
                    return;
                  }
                  nlohmann::ordered_json body;
                  body["engines_up"] = stats->engines;
                  body["engines"] = total;
                  if (stats->engines > 0 && stats->engines >= total) {
                    body["status"] = "ok";
                    writer->respond(200, "application/json", dump_json(body));
                  } else {
                    body["status"] = "unavailable";
                    body["reason"] = std::to_string(stats->engines) + " of " +
                                     std::to_string(total) + " engines are up";
                    writer->respond(503, "application/json", dump_json(body));
                  }
                });
              });
  http_.route(
      "GET", "/metrics", [shared](const HttpRequest&, std::shared_ptr<ResponseWriter> writer) {
        with_cluster_state(shared, [shared, writer](const CoordinatorStats* stats) {
          if (stats != nullptr) {
            // Each engine of the cluster by its stable name, up when
            // the coordinator has it registered.
            const auto& engines = shared->cluster.engines();
            const auto& names = shared->cluster.engine_names();
            std::vector<bool> reported(engines.size(), false);
            ClusterState state;
            for (std::size_t i = 0; i < stats->loads.size(); ++i) {
              const LoadReport& load = stats->loads[i];
              const auto known = i < stats->handles.size()
                                     ? std::find(engines.begin(), engines.end(), stats->handles[i])
                                     : engines.end();
              EngineState engine;
              if (known != engines.end()) {
                const auto index = static_cast<std::size_t>(known - engines.begin());
                engine.name = names[index];
                reported[index] = true;
              } else {
                engine.name = "unlisted-" + std::to_string(i);
              }
              engine.up = true;
              engine.running = load.running;
              engine.waiting = load.waiting;
              engine.free_blocks = load.free_blocks;
              engine.total_blocks = load.total_blocks;
              engine.cached_blocks = load.cached_blocks;
              engine.load = load.score;
              engine.preemptions = load.preemptions;
              engine.prompt_tokens = load.prompt_tokens;
              engine.generated_tokens = load.generated_tokens;
              engine.prefix_queried_tokens = load.prefix_queried_tokens;
              engine.prefix_hit_tokens = load.prefix_hit_tokens;
              state.engines.push_back(std::move(engine));
            }
            for (std::size_t i = 0; i < engines.size(); ++i)
              if (!reported[i]) {
                EngineState down;
                down.name = names[i];
                state.engines.push_back(std::move(down));
              }
            try {
              shared->metrics->set_cluster_state(state);
            } catch (const std::exception& e) {
              log(LogLevel::Warning, "metrics: {}", e.what());
            }
          }
          writer->respond(200, "text/plain; version=0.0.4; charset=utf-8",
                          shared->metrics->render());
        });
      });
  http_.fallback([shared](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
    send_error(*writer, path_not_found(request.method, request.target),
               shared->options.retry_after);
  });
}

OpenAiServer::~OpenAiServer() {
  stop();
}

void OpenAiServer::start() {
  monitor_->start();
  http_.start();
}

std::uint16_t OpenAiServer::port() const {
  return http_.port();
}

void OpenAiServer::stop() {
  http_.stop();
  monitor_->stop();
}

} // namespace caflm::server
