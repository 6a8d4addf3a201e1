// `caflm bench-serve` against a fake OpenAI server (a Python script that
// streams chunks at a fixed pace): what it sends, what it counts, its report
// as a table, as JSON and as a PNG, and how it fails. Latencies are checked
// for order and consistency, never for their size.
#include <catch2/catch.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <csignal>
#include <cstdlib>
#include <map>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/cli_harness.hpp"

using namespace caflm::testing;
using nlohmann::json;

namespace {

/// tests/support/fake_openai_server.py running with `args`, on a port of
/// its choosing; killed with this object.
class FakeServer {
 public:
  explicit FakeServer(const std::vector<std::string>& args) {
    int out[2];
    REQUIRE(::pipe(out) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<std::string> words{"python3", FAKE_OPENAI_SERVER, "--port", "0"};
      words.insert(words.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& word : words)
        argv.push_back(word.data());
      argv.push_back(nullptr);
      ::execvp("python3", argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // The first line is `PORT <n>`, written once it listens.
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n')
      line += c;
    ::close(out[0]);
    INFO("fake server said: " << line);
    REQUIRE(line.rfind("PORT ", 0) == 0);
    port_ = std::stoi(line.substr(5));
  }
  ~FakeServer() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

/// A loopback port with a socket bound but not listening: connecting to it
/// is refused.
class DeadPort {
 public:
  DeadPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~DeadPort() { ::close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      lines.push_back(json::parse(line));
  return lines;
}

Run bench(const std::string& url, std::vector<std::string> args) {
  args.insert(args.begin(), {"bench-serve", "--url", url});
  return run_caflm(args);
}

/// Each of TTFT, TPOT, ITL and E2EL: 0 <= median <= p90 <= p99, mean within
/// [0, max].
void check_distributions(const json& report) {
  for (const char* name : {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}) {
    INFO(name << ": " << report.at(name).dump());
    const json& d = report.at(name);
    CHECK(d.at("median").get<double>() >= 0);
    CHECK(d.at("p90").get<double>() >= d.at("median").get<double>());
    CHECK(d.at("p99").get<double>() >= d.at("p90").get<double>());
    CHECK(d.at("mean").get<double>() >= 0);
  }
  CHECK(report.at("ttft_ms").at("median").get<double>() <=
        report.at("e2el_ms").at("p99").get<double>());
}

/// Per request: 0 <= TTFT <= E2E, sent no earlier than it arrived, one ITL
/// gap fewer than chunks.
void check_request_timings(const json& request) {
  INFO(request.dump());
  CHECK(request.at("sent_s").get<double>() >= request.at("arrival_s").get<double>());
  CHECK(request.at("finished_s").get<double>() >= request.at("sent_s").get<double>());
  if (!request.at("success").get<bool>())
    return;
  REQUIRE(request.at("ttft_ms").is_number());
  CHECK(request.at("ttft_ms").get<double>() >= 0);
  CHECK(request.at("ttft_ms").get<double>() <= request.at("e2el_ms").get<double>());
  CHECK(request.at("itl_ms").size() + 1 == request.at("chunk_times_s").size());
  for (const json& gap : request.at("itl_ms"))
    CHECK(gap.get<double>() >= 0);
}

std::uint32_t read_u32(const std::string& bytes, std::size_t at) {
  return (std::uint32_t(std::uint8_t(bytes[at])) << 24) |
         (std::uint32_t(std::uint8_t(bytes[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(bytes[at + 2])) << 8) | std::uint8_t(bytes[at + 3]);
}

} // namespace

TEST_CASE("bench-serve sends the planned workload and reports it as a table, JSON and a PNG") {
  TempDir dir;
  const std::string log = (dir / "requests.jsonl").string();
  FakeServer server({"--log", log, "--vocab-size", "1000"});
  const std::string report_path = (dir / "report.json").string();
  const std::string plot_path = (dir / "plot.png").string();
  Run run = bench(server.url(), {"--requests",
                                 "12",
                                 "--rate",
                                 "inf",
                                 "--max-concurrency",
                                 "3",
                                 "--input-len",
                                 "20",
                                 "--output-len",
                                 "8",
                                 "--range-ratio",
                                 "0.5",
                                 "--prefix-len",
                                 "5",
                                 "--vocab-size",
                                 "1000",
                                 "--seed",
                                 "7",
                                 "--json",
                                 report_path,
                                 "--plot",
                                 plot_path});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("Successful requests:") != std::string::npos);
  CHECK(run.out.find("Median TTFT (ms):") != std::string::npos);
  CHECK(run.out.find("P99 ITL (ms):") != std::string::npos);

  // What the server received: 12 token-id prompts sharing the 5-token
  // prefix, lengths within the range (the server checked the rest).
  std::vector<json> bodies = json_lines(read_file(log));
  REQUIRE(bodies.size() == 12);
  std::uint64_t asked_tokens = 0;
  std::set<std::size_t> lengths;
  for (json& body : bodies) {
    const auto prompt = body["prompt"].get<std::vector<std::int64_t>>();
    const std::vector<std::int64_t> first_prompt = bodies[0]["prompt"];
    REQUIRE(prompt.size() >= 5);
    CHECK(std::equal(prompt.begin(), prompt.begin() + 5, first_prompt.begin()));
    CHECK(prompt.size() - 5 >= 10);
    CHECK(prompt.size() - 5 <= 30);
    const auto max_tokens = body["max_tokens"].get<std::uint32_t>();
    CHECK(max_tokens >= 4);
    CHECK(max_tokens <= 12);
    asked_tokens += max_tokens;
    lengths.insert(prompt.size());
  }
  CHECK(lengths.size() > 1); // the range ratio varies them

  json report = json::parse(read_file(report_path));
  CHECK(report["completed"] == 12);
  CHECK(report["failed"] == 0);
  CHECK(report["total_output_tokens"].get<std::uint64_t>() == asked_tokens);
  CHECK(report["output_tokens_from_usage"] == true);
  CHECK(report["config"]["prefix_len"] == 5);
  CHECK(report["request_throughput"].get<double>() > 0);
  CHECK(report["output_throughput"].get<double>() > report["request_throughput"].get<double>());
  check_distributions(report);
  REQUIRE(report["requests"].size() == 12);
  std::vector<std::pair<double, double>> busy;
  for (json& request : report["requests"]) {
    check_request_timings(request);
    // One chunk per token from this server.
    CHECK(request["chunk_times_s"].size() == request["output_tokens"].get<std::size_t>());
    busy.emplace_back(request["sent_s"].get<double>(), request["finished_s"].get<double>());
  }
  // --max-concurrency 3: no instant has more than three requests in flight.
  for (const auto& [sent, finished] : busy) {
    (void)finished;
    int in_flight = 0;
    for (const auto& [other_sent, other_finished] : busy)
      in_flight += other_sent <= sent && sent < other_finished;
    CHECK(in_flight <= 3);
  }

  // The PNG: signature, IHDR, and pixel data zlib can inflate to exactly
  // height rows of (1 + 3 * width) bytes, not all white.
  const std::string png = read_file(plot_path);
  REQUIRE(png.size() > 33);
  CHECK(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
  CHECK(png.compare(12, 4, "IHDR") == 0);
  const std::uint32_t width = read_u32(png, 16), height = read_u32(png, 20);
  CHECK(width >= 100);
  CHECK(height >= 100);
  const std::string check =
      "import sys, struct, zlib\n"
      "data = open(sys.argv[1], 'rb').read()\n"
      "at, idat, width, height = 8, b'', 0, 0\n"
      "while at < len(data):\n"
      "    n, kind = struct.unpack('>I4s', data[at:at + 8])\n"
      "    body = data[at + 8:at + 8 + n]\n"
      "    assert zlib.crc32(kind + body) == struct.unpack('>I', data[at + 8 + n:at + 12 + n])[0]\n"
      "    if kind == b'IHDR': width, height = struct.unpack('>II', body[:8])\n"
      "    if kind == b'IDAT': idat += body\n"
      "    at += 12 + n\n"
      "raw = zlib.decompress(idat)\n"
      "assert len(raw) == height * (1 + 3 * width), len(raw)\n"
      "assert sum(1 for b in raw if b != 255 and b != 0) > 100\n"
      "print('ok', width, height)\n";
  std::ofstream(dir / "check_png.py") << check;
  const std::string command =
      "python3 " + shell_quote((dir / "check_png.py").string()) + " " + shell_quote(plot_path);
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("bench-serve counts tokens from usage when a chunk carries several") {
  TempDir dir;
  FakeServer server({"--tokens-per-chunk", "3"});
  const std::string report_path = (dir / "report.json").string();
  Run run = bench(server.url(), {"--requests", "4", "--rate", "100", "--input-len", "10",
                                 "--output-len", "9", "--json", report_path});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  json report = json::parse(read_file(report_path));
  CHECK(report["completed"] == 4);
  CHECK(report["total_output_tokens"] == 36);
  check_distributions(report);
  double previous_arrival = -1;
  for (json& request : report["requests"]) {
    check_request_timings(request);
    CHECK(request["output_tokens"] == 9);
    CHECK(request["chunk_times_s"].size() == 3);
    CHECK(request["itl_ms"].size() == 2);
    // A finite rate spaces the arrivals, the first at 0.
    CHECK(request["arrival_s"].get<double>() > previous_arrival);
    previous_arrival = request["arrival_s"].get<double>();
  }
  CHECK(report["requests"][0]["arrival_s"] == 0.0);
}

TEST_CASE("bench-serve without usage counts chunks with text, and says so") {
  TempDir dir;
  FakeServer server({"--tokens-per-chunk", "2", "--no-usage"});
  const std::string report_path = (dir / "report.json").string();
  Run run = bench(server.url(), {"--requests", "3", "--input-len", "4", "--output-len", "6",
                                 "--json", report_path});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("no usage") != std::string::npos);
  json report = json::parse(read_file(report_path));
  CHECK(report["completed"] == 3);
  CHECK(report["output_tokens_from_usage"] == false);
  CHECK(report["total_output_tokens"] == 9);
}

TEST_CASE("bench-serve counts 429 answers and error events as failures with their reason") {
  TempDir dir;
  const std::string report_path = (dir / "report.json").string();
  SECTION("429") {
    FakeServer server({"--reject-every", "3"});
    Run run = bench(server.url(), {"--requests", "9", "--max-concurrency", "1", "--input-len", "4",
                                   "--output-len", "3", "--json", report_path});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    CHECK(run.out.find("HTTP 429: the queue is full") != std::string::npos);
    json report = json::parse(read_file(report_path));
    CHECK(report["completed"] == 6);
    CHECK(report["failed"] == 3);
    CHECK(report["failures"].value("HTTP 429: the queue is full", 0) == 3);
    CHECK(report["total_output_tokens"] == 18);
    for (json& request : report["requests"])
      check_request_timings(request);
  }
  SECTION("an error event mid-stream") {
    FakeServer server({"--error-event-every", "2"});
    Run run = bench(server.url(), {"--requests", "4", "--max-concurrency", "1", "--input-len", "4",
                                   "--output-len", "5", "--json", report_path});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    json report = json::parse(read_file(report_path));
    CHECK(report["completed"] == 2);
    CHECK(report["failed"] == 2);
    REQUIRE(report["failures"].size() == 1);
    CHECK(report["failures"].begin().key().find("engine failed mid-stream") != std::string::npos);
  }
  SECTION("every request refused: the report, then a non-zero exit") {
    FakeServer server({"--reject-every", "1"});
    Run run = bench(server.url(), {"--requests", "3", "--input-len", "4", "--output-len", "3"});
    INFO(describe(run));
    CHECK_FALSE(run.crashed);
    CHECK(run.exit_code == 1);
    CHECK(run.out.find("Failed requests:") != std::string::npos);
    CHECK(run.err.find("all 3 requests failed") != std::string::npos);
    CHECK(run.err.find("429") != std::string::npos);
  }
}

TEST_CASE("bench-serve sends the API key and names the model from /v1/models") {
  FakeServer server({"--api-key", "sesame", "--model", "llama-x"});
  Run without = bench(server.url(), {"--requests", "2", "--input-len", "4", "--output-len", "2"});
  check_clean_failure(without, "401");
  Run with = bench(server.url(), {"--requests", "2", "--input-len", "4", "--output-len", "2",
                                  "--api-key", "sesame"});
  INFO(describe(with));
  CHECK(with.exit_code == 0);
  CHECK(with.err.find("llama-x") != std::string::npos);
  // A wrong --model reaches the server, which refuses it: each request fails.
  Run wrong = bench(server.url(), {"--requests", "2", "--input-len", "4", "--output-len", "2",
                                   "--api-key", "sesame", "--model", "other"});
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.err.find("unknown model") != std::string::npos);
}

TEST_CASE("bench-serve fails clearly on an unreachable server, a bad URL or bad numbers") {
  DeadPort dead;
  check_clean_failure(bench(dead.url(), {"--requests", "3"}), "cannot reach the server");
  check_clean_failure(bench("https://127.0.0.1:8000", {}), "https is not supported");
  check_clean_failure(bench("127.0.0.1:8000", {}), "must start with http://");
  check_clean_failure(bench("http://:8000", {}), "no host");
  check_clean_failure(bench("http://127.0.0.1:99999", {}), "port");
  check_clean_failure(bench("http://127.0.0.1:8000?x=1", {}), "query");
  check_clean_failure(bench(dead.url(), {"--rate", "0"}), "--rate");
  check_clean_failure(bench(dead.url(), {"--rate", "fast"}), "--rate");
  check_clean_failure(bench(dead.url(), {"--burstiness", "0"}), "--burstiness");
  check_clean_failure(bench(dead.url(), {"--range-ratio", "1"}), "--range-ratio");
  check_clean_failure(bench(dead.url(), {"--requests", "0"}), "--requests");
  check_clean_failure(bench(dead.url(), {"--output-len", "-2"}), "--output-len");
}

TEST_CASE("--num-prefixes gives the prompts several shared prefixes, each picked at random",
          "[bench_serve]") {
  TempDir dir;
  const std::string log = (dir / "requests.jsonl").string();
  FakeServer server({"--log", log, "--vocab-size", "1000"});
  Run run = bench(server.url(), {"--requests", "30", "--rate", "inf", "--input-len", "3",
                                 "--output-len", "2", "--prefix-len", "4", "--num-prefixes", "3",
                                 "--vocab-size", "1000", "--seed", "5"});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  std::vector<json> bodies = json_lines(read_file(log));
  REQUIRE(bodies.size() == 30);
  // Group the prompts by their first four tokens.
  std::map<std::vector<std::int64_t>, int> uses;
  for (json& body : bodies) {
    const auto prompt = body["prompt"].get<std::vector<std::int64_t>>();
    REQUIRE(prompt.size() == 7);
    ++uses[std::vector<std::int64_t>(prompt.begin(), prompt.begin() + 4)];
  }
  // Three prefixes, none taking nearly all (the draw for seed 5 is fixed).
  REQUIRE(uses.size() == 3);
  for (const auto& [prefix, count] : uses)
    CHECK(count < 20);
  check_clean_failure(bench(server.url(), {"--requests", "1", "--num-prefixes", "0"}),
                      "--num-prefixes");
}
