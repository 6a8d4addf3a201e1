#include "apps/bench_serve/load_generator.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

namespace caflm::apps::bench_serve {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

/// The most of an error response's body kept for its message.
constexpr std::size_t kMaxErrorBody = 64 * 1024;

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds));
}

/// The message of an OpenAI error body (`{"error": {"message": ...}}`), or
/// the body itself, cut short.
std::string error_message(const std::string& body) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object() && json.contains("error")) {
    const nlohmann::json& error = json["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string())
      return error["message"].get<std::string>();
    if (error.is_string())
      return error.get<std::string>();
    return error.dump();
  }
  std::string text = body.substr(0, 200);
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

http::request<http::string_body> make_request(const LoadOptions& options, http::verb verb,
                                              const std::string& path, std::string body) {
  http::request<http::string_body> request{verb, options.url.base_path + path, 11};
  request.set(http::field::host, options.url.host + ":" + options.url.port);
  request.set(http::field::user_agent, "caflm-bench-serve");
  // One connection per request: a closed connection marks the end of each
  // exchange, and no request waits behind another on a shared socket.
  request.set(http::field::connection, "close");
  if (!options.api_key.empty())
    request.set(http::field::authorization, "Bearer " + options.api_key);
  if (verb == http::verb::post) {
    request.set(http::field::content_type, "application/json");
    request.set(http::field::accept, "text/event-stream");
    request.body() = std::move(body);
    request.prepare_payload();
  }
  return request;
}

tcp::resolver::results_type resolve(asio::io_context& io, const ServerUrl& url) {
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto results = resolver.resolve(url.host, url.port, ec);
  if (ec)
    throw std::runtime_error("cannot resolve " + url.host + " (from --url " + url.to_string() +
                             "): " + ec.message());
  return results;
}

/// One streaming completion on its own connection: connect, send, read the
/// header, then the body piece by piece as the server sends it, each piece
/// timed when it is read.
class StreamExchange : public std::enable_shared_from_this<StreamExchange> {
 public:
  StreamExchange(asio::io_context& io, const tcp::resolver::results_type& endpoints,
                 const LoadOptions& options, const PlannedRequest& request, RequestOutcome& outcome,
                 Clock::time_point start, std::function<void(bool connected)> on_done)
    : stream_(io)
    , endpoints_(endpoints)
    , timeout_(to_duration(options.idle_timeout_s))
    , request_(make_request(options, http::verb::post, "/v1/completions",
                            completion_request_body(options.model, request)))
    , outcome_(outcome)
    , reader_(outcome)
    , start_(start)
    , on_done_(std::move(on_done)) {
    // A stream is as long as the server makes it. (Not boost::none: Beast
    // 1.74 compares a Content-Length against it as if none were 0.)
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    outcome_.prompt_tokens = static_cast<std::uint32_t>(request.prompt.size());
  }

  void start() {
    outcome_.sent_s = now();
    stream_.expires_after(timeout_);
    stream_.async_connect(endpoints_,
                          [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                            self->on_connect(ec);
                          });
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  void on_connect(beast::error_code ec) {
    if (ec)
      return finish("connect: " + describe(ec));
    connected_ = true;
    stream_.expires_after(timeout_);
    http::async_write(
        stream_, request_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
  }

  void on_write(beast::error_code ec) {
    if (ec)
      return finish("sending the request: " + describe(ec));
    stream_.expires_after(timeout_);
    http::async_read_header(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec)
      return finish("reading the response header: " + describe(ec));
    status_ = parser_.get().result_int();
    read_body();
  }

  void read_body() {
    if (parser_.is_done())
      return finish_response();
    parser_.get().body().data = piece_;
    parser_.get().body().size = sizeof piece_;
    stream_.expires_after(timeout_);
    // read_some returns as soon as some body arrived, so each piece is timed
    // when it comes, not when a buffer fills.
    http::async_read_some(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (ec == http::error::need_buffer)
      ec = {};
    const std::size_t size = sizeof piece_ - parser_.get().body().size;
    if (size > 0) {
      if (status_ == 200)
        reader_.feed(piece_, size, now());
      else if (error_body_.size() < kMaxErrorBody)
        error_body_.append(piece_, std::min(size, kMaxErrorBody - error_body_.size()));
    }
    if (ec)
      return finish("reading the response: " + describe(ec));
    read_body();
  }

  void finish_response() {
    if (status_ != 200)
      return finish("HTTP " + std::to_string(status_) + ": " + error_message(error_body_));
    if (!reader_.error().empty())
      return finish(reader_.error());
    if (!reader_.done())
      return finish("the stream ended without data: [DONE]");
    finish({});
  }

  void finish(std::string error) {
    outcome_.finished_s = now();
    outcome_.success = error.empty();
    outcome_.error = std::move(error);
    if (!outcome_.output_tokens_from_usage)
      outcome_.output_tokens = static_cast<std::uint32_t>(outcome_.chunk_times_s.size());
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    on_done_(connected_);
  }

  std::string describe(beast::error_code ec) const {
    if (ec == beast::error::timeout)
      return "no data for " + std::to_string(std::chrono::duration<double>(timeout_).count()) +
             " s (--request-timeout)";
    return ec.message();
  }

  beast::tcp_stream stream_;
  const tcp::resolver::results_type& endpoints_;
  std::chrono::nanoseconds timeout_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  char piece_[16 * 1024];
  int status_ = 0;
  std::string error_body_;
  bool connected_ = false;
  RequestOutcome& outcome_;
  SseReader reader_;
  Clock::time_point start_;
  std::function<void(bool)> on_done_;
};

/// Starts the requests of a plan at their arrival times, no more than
/// --max-concurrency at once: a request arriving while every slot is taken
/// waits for one (first come, first served) while later arrivals keep their
/// schedule.
class LoadRun {
 public:
  LoadRun(asio::io_context& io, const LoadOptions& options, const std::vector<PlannedRequest>& plan,
          tcp::resolver::results_type endpoints)
    : io_(io)
    , options_(options)
    , plan_(plan)
    , endpoints_(std::move(endpoints))
    , timer_(io)
    , outcomes_(plan.size()) {}

  std::vector<RequestOutcome> run() {
    start_ = Clock::now();
    schedule_next();
    io_.run();
    return std::move(outcomes_);
  }

 private:
  void schedule_next() {
    if (next_ >= plan_.size() || aborted_)
      return;
    timer_.expires_at(start_ + to_duration(plan_[next_].arrival_s));
    timer_.async_wait([this](beast::error_code ec) {
      if (ec || aborted_)
        return;
      // Every request due by now arrives now, in plan order.
      const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
      do
        arrive(next_++);
      while (next_ < plan_.size() && plan_[next_].arrival_s <= elapsed && !aborted_);
      schedule_next();
    });
  }

  void arrive(std::size_t index) {
    outcomes_[index].arrival_s = plan_[index].arrival_s;
    if (options_.max_concurrency == 0 || in_flight_ < options_.max_concurrency)
      launch(index);
    else
      waiting_.push_back(index);
  }

  void launch(std::size_t index) {
    ++in_flight_;
    std::make_shared<StreamExchange>(io_, endpoints_, options_, plan_[index], outcomes_[index],
                                     start_, [this](bool connected) { on_done(connected); })
        ->start();
  }

  void on_done(bool connected) {
    --in_flight_;
    if (connected) {
      any_connected_ = true;
      connect_failures_ = 0;
    } else if (!any_connected_ && ++connect_failures_ >= options_.max_connect_failures) {
      abort_unsent();
    }
    if (!waiting_.empty() && !aborted_) {
      const std::size_t index = waiting_.front();
      waiting_.pop_front();
      launch(index);
    }
  }

  /// The server cannot be reached: what was not sent yet fails at once.
  void abort_unsent() {
    if (aborted_)
      return;
    aborted_ = true;
    timer_.cancel();
    const std::string reason =
        "not sent: " + std::to_string(connect_failures_) + " connections in a row failed";
    auto fail = [&](std::size_t index) {
      outcomes_[index].arrival_s = plan_[index].arrival_s;
      outcomes_[index].error = reason;
      outcomes_[index].prompt_tokens = static_cast<std::uint32_t>(plan_[index].prompt.size());
    };
    for (std::size_t index : waiting_)
      fail(index);
    waiting_.clear();
    for (; next_ < plan_.size(); ++next_)
      fail(next_);
  }

  asio::io_context& io_;
  const LoadOptions& options_;
  const std::vector<PlannedRequest>& plan_;
  tcp::resolver::results_type endpoints_;
  asio::steady_timer timer_;
  std::vector<RequestOutcome> outcomes_;
  Clock::time_point start_;
  std::size_t next_ = 0;
  std::uint32_t in_flight_ = 0;
  std::deque<std::size_t> waiting_;
  bool any_connected_ = false;
  std::uint32_t connect_failures_ = 0;
  bool aborted_ = false;
};

} // namespace

std::string ServerUrl::to_string() const {
  return "http://" + host + ":" + port + base_path;
}

ServerUrl parse_server_url(const std::string& url) {
  const std::string scheme = "http://";
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--url " + url + ": " + why +
                                 " (expected http://host:port[/base])");
  };
  if (url.rfind("https://", 0) == 0)
    throw bad("https is not supported");
  if (url.rfind(scheme, 0) != 0)
    throw bad("it must start with http://");
  std::string rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string::npos)
    throw bad("a query or fragment is not allowed");
  const std::size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  ServerUrl parsed;
  parsed.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!parsed.base_path.empty() && parsed.base_path.back() == '/')
    parsed.base_path.pop_back();
  // Users often paste the API root; /v1/completions is appended here.
  if (parsed.base_path.size() >= 3 &&
      parsed.base_path.compare(parsed.base_path.size() - 3, 3, "/v1") == 0)
    parsed.base_path.resize(parsed.base_path.size() - 3);
  if (authority.find('@') != std::string::npos)
    throw bad("user information is not allowed");
  std::string port = "80";
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string::npos)
      throw bad("unclosed [ in the host");
    parsed.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':')
        throw bad("garbage after the IPv6 address");
      port = authority.substr(close + 2);
    }
  } else {
    const std::size_t colon = authority.rfind(':');
    parsed.host = authority.substr(0, colon);
    if (colon != std::string::npos)
      port = authority.substr(colon + 1);
  }
  if (parsed.host.empty())
    throw bad("no host");
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) == 0 || std::stoul(port) > 65535)
    throw bad("the port must be a number from 1 to 65535");
  parsed.port = std::to_string(std::stoul(port));
  return parsed;
}

std::string completion_request_body(const std::string& model, const PlannedRequest& request) {
  nlohmann::json body;
  body["model"] = model;
  body["prompt"] = request.prompt;
  body["max_tokens"] = request.max_tokens;
  body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["temperature"] = 0;
  return body.dump();
}

void SseReader::feed(const char* data, std::size_t size, double time_s) {
  pending_.append(data, size);
  // Events end at a blank line; CR LF line ends count as LF.
  for (;;) {
    std::size_t end = std::string::npos;
    std::size_t skip = 0;
    for (const char* separator : {"\n\n", "\r\n\r\n", "\r\r"}) {
      const std::size_t at = pending_.find(separator);
      if (at < end) {
        end = at;
        skip = std::char_traits<char>::length(separator);
      }
    }
    if (end == std::string::npos)
      return;
    const std::string event = pending_.substr(0, end);
    pending_.erase(0, end + skip);
    handle_event(event, time_s);
  }
}

void SseReader::handle_event(const std::string& event, double time_s) {
  std::string data;
  bool has_data = false;
  std::size_t begin = 0;
  while (begin <= event.size()) {
    std::size_t end = event.find('\n', begin);
    if (end == std::string::npos)
      end = event.size();
    std::string line = event.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.rfind("data:", 0) == 0) {
      std::string value = line.substr(5);
      if (!value.empty() && value.front() == ' ')
        value.erase(0, 1);
      if (has_data)
        data += '\n';
      data += value;
      has_data = true;
    }
    begin = end + 1;
  }
  if (has_data)
    handle_data(data, time_s);
}

void SseReader::handle_data(const std::string& data, double time_s) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, false);
  if (!chunk.is_object()) {
    if (error_.empty())
      error_ = "malformed stream event: " + data.substr(0, 200);
    return;
  }
  if (chunk.contains("error")) {
    if (error_.empty())
      error_ = "error event: " + error_message(data);
    return;
  }
  const auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    const nlohmann::json& choice = (*choices)[0];
    bool carries_tokens = false;
    if (choice.contains("text") && choice["text"].is_string())
      carries_tokens = !choice["text"].get_ref<const std::string&>().empty();
    // A chat chunk, for servers that answer completions in that shape.
    if (choice.contains("delta") && choice["delta"].is_object() &&
        choice["delta"].contains("content") && choice["delta"]["content"].is_string())
      carries_tokens = carries_tokens || !choice["delta"]["content"].get<std::string>().empty();
    // Some servers stream token ids beside (or instead of) the text.
    if (choice.contains("token_ids") && choice["token_ids"].is_array())
      carries_tokens = carries_tokens || !choice["token_ids"].empty();
    if (carries_tokens)
      outcome_.chunk_times_s.push_back(time_s);
  }
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    if (usage->contains("completion_tokens") &&
        (*usage)["completion_tokens"].is_number_unsigned()) {
      outcome_.output_tokens = (*usage)["completion_tokens"].get<std::uint32_t>();
      outcome_.output_tokens_from_usage = true;
    }
    if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_unsigned())
      outcome_.prompt_tokens = (*usage)["prompt_tokens"].get<std::uint32_t>();
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object() && details->contains("cached_tokens") &&
        (*details)["cached_tokens"].is_number_unsigned())
      outcome_.cached_tokens = (*details)["cached_tokens"].get<std::uint32_t>();
  }
}

ModelList fetch_models(const LoadOptions& options) {
  asio::io_context io;
  const auto endpoints = resolve(io, options.url);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::request<http::string_body> request =
      make_request(options, http::verb::get, "/v1/models", {});
  http::response<http::string_body> response;
  beast::error_code failure;
  std::string stage = "connecting to";
  const auto timeout = std::chrono::seconds(30);
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) {
      failure = ec;
      return;
    }
    stage = "sending to";
    stream.expires_after(timeout);
    http::async_write(stream, request, [&](beast::error_code ec, std::size_t) {
      if (ec) {
        failure = ec;
        return;
      }
      stage = "reading from";
      stream.expires_after(timeout);
      http::async_read(stream, buffer, response,
                       [&](beast::error_code ec, std::size_t) { failure = ec; });
    });
  });
  io.run();
  if (failure)
    throw std::runtime_error("cannot reach the server at " + options.url.to_string() + " (" +
                             stage + " it for GET /v1/models): " + failure.message());
  ModelList list;
  list.status = response.result_int();
  if (list.status != 200) {
    list.error = error_message(response.body());
    return list;
  }
  const nlohmann::json json = nlohmann::json::parse(response.body(), nullptr, false);
  if (json.is_object() && json.contains("data") && json["data"].is_array())
    for (const nlohmann::json& model : json["data"])
      if (model.is_object() && model.contains("id") && model["id"].is_string())
        list.ids.push_back(model["id"].get<std::string>());
  return list;
}

std::vector<RequestOutcome> run_load(const LoadOptions& options,
                                     const std::vector<PlannedRequest>& plan) {
  asio::io_context io(1);
  auto endpoints = resolve(io, options.url);
  return LoadRun(io, options, plan, std::move(endpoints)).run();
}

} // namespace caflm::apps::bench_serve
