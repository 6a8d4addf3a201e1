// The `caflm` command given bad input, as a new user gives it: request files
// with wrong types, out-of-range numbers and misspelt fields, paths that are
// directories or unreadable, options of zero or that overflow, a port in
// use, an address nobody listens on, sizes beyond the model's context. Each
// gets a clear message naming its cause and a non-zero status; nothing
// crashes, and what can still run, runs.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "tests/support/cli_harness.hpp"

using namespace caflm::testing;

namespace {

const std::string kTinyModel = CAFLM_TESTDATA_DIR "/models/tiny-llama-f32.gguf";

/// A small random model, written once for this binary.
const std::string& small_model() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string out = (dir / "small.gguf").string();
    Run run = make_small_model(out, {"llama", "f32", "128", "5", {}});
    REQUIRE(run.exit_code == 0);
    return out;
  }();
  return path;
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::json::parse(line));
  return lines;
}

/// A listening TCP socket on loopback, on a port the kernel picks.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { ::close(fd_); }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

} // namespace

TEST_CASE("request file lines are checked field by field; good lines still run") {
  const std::string requests = R"({"id": "a", "prompt": "Hello", "max_tokens": 3, "seed": 1}
{"id": "b", "prompt": "Hello", "max_tokens": -3}
{"id": "c", "prompt": "Hello", "max_token": 3}
{"id": "d", "prompt": "Hello", "temperature": "hot"}
{"id": "e", "prompt": "Hello", "top_p": 0}
{"id": "f", "prompt": "Hello", "stop": ["x", 3]}
[1, 2, 3]
{"id": "g", "prompt": "Hello", "max_tokens": 2, "temperature": 0}
)";
  Run run = run_caflm({"generate", "--model", small_model(), "--requests", "-"}, requests);
  INFO(describe(run));
  CHECK_FALSE(run.crashed);
  CHECK(run.exit_code == 1);
  CHECK(run.err.find("6 request(s) failed") != std::string::npos);
  std::map<std::string, nlohmann::json> by_id;
  for (const nlohmann::json& line : json_lines(run.out))
    by_id[line["id"].is_string() ? line["id"].get<std::string>() : line["id"].dump()] = line;
  REQUIRE(by_id.size() == 8);
  CHECK(by_id["a"]["tokens"].size() == 3);
  CHECK(by_id["g"]["tokens"].size() == 2);
  auto message = [&](const std::string& id) {
    return by_id[id]["error"]["message"].get<std::string>();
  };
  // Bad lines are named by their line number.
  CHECK(message("2").find("line 2: \"max_tokens\" must be in [1, 4294967295], not -3") !=
        std::string::npos);
  CHECK(message("3").find("unknown field \"max_token\" (did you mean \"max_tokens\"?)") !=
        std::string::npos);
  CHECK(message("4").find("\"temperature\" must be a number") != std::string::npos);
  CHECK(message("5").find("top_p") != std::string::npos);
  CHECK(message("6").find("\"stop\" holds 3") != std::string::npos);
  CHECK(message("7").find("expected a JSON object") != std::string::npos);
}

TEST_CASE("every request file field is documented in --help") {
  Run run = run_caflm({"generate", "--help"});
  REQUIRE(run.exit_code == 0);
  for (const char* field :
       {"\"prompt\"", "\"prompt_tokens\"", "\"id\"", "\"max_tokens\"", "\"temperature\"",
        "\"top_p\"", "\"top_k\"", "\"min_p\"", "\"repetition_penalty\"", "\"presence_penalty\"",
        "\"frequency_penalty\"", "\"seed\"", "\"stop\"", "\"ignore_eos\"", "\"top_logprobs\"",
        "\"priority\""})
    CHECK(run.out.find(field) != std::string::npos);
}

TEST_CASE("paths that are directories or unreadable are errors that say so") {
  TempDir dir;
  check_clean_failure(run_caflm({"generate", "--model", small_model(), "--requests",
                                 fs::temp_directory_path().string()}),
                      "is a directory");
  check_clean_failure(run_caflm({"generate", "--model", small_model(), "--requests",
                                 (dir / "missing.jsonl").string()}),
                      "cannot read --requests");
  check_clean_failure(run_caflm({"tokenize", "--model", small_model(), "--file",
                                 fs::temp_directory_path().string()}),
                      "is a directory");
}

TEST_CASE("tokenize reads its text from an argument, a file or standard input alike") {
  TempDir dir;
  const std::string text = "Hello world, -- with dashes\nand a second line";
  std::ofstream(dir / "text.txt", std::ios::binary) << text;
  Run from_argument = run_caflm({"tokenize", "--model", kTinyModel, "--", text});
  Run from_file = run_caflm({"tokenize", "--model", kTinyModel, "--file", (dir / "text.txt")});
  Run from_stdin = run_caflm({"tokenize", "--model", kTinyModel}, text);
  REQUIRE(from_argument.exit_code == 0);
  CHECK_FALSE(from_argument.out.empty());
  CHECK(from_file.out == from_argument.out);
  CHECK(from_stdin.out == from_argument.out);
}

TEST_CASE("worker options that could never serve are refused") {
  check_clean_failure(
      run_caflm({"worker", "--model", small_model(), "--port", "0", "--max-concurrent", "0"}),
      "--max-concurrent");
  check_clean_failure(
      run_caflm({"worker", "--model", small_model(), "--port", "0", "--queue", "0"}), "--queue");
  // 2^44 MiB is 2^64 bytes: it must not wrap to a tiny cache.
  check_clean_failure(run_caflm({"worker", "--model", small_model(), "--port", "0", "--kv-cache-mb",
                                 "17592186044416"}),
                      "--kv-cache-mb");
}

TEST_CASE("a port in use is reported before the model is even loaded") {
  Listener taken;
  // The model path does not exist: only a check made before loading names
  // the port.
  check_clean_failure(run_caflm({"worker", "--model", "/nonexistent/model.gguf", "--port",
                                 std::to_string(taken.port())}),
                      "port " + std::to_string(taken.port()) + " is already in use");
}

TEST_CASE("an address nobody listens on is named, with the reason, within the connect timeout") {
  std::uint16_t closed = 0;
  {
    Listener briefly;
    closed = briefly.port();
  }
  Run run = run_caflm({"generate", "--worker", "127.0.0.1:" + std::to_string(closed), "--prompt",
                       "hi", "--connect-timeout", "2"});
  check_clean_failure(run, "127.0.0.1:" + std::to_string(closed));
  CHECK(run.err.find("refused") != std::string::npos);
}

TEST_CASE("an address that accepts connections but never speaks is named as silent") {
  Listener silent; // the kernel accepts; nobody answers
  Run run = run_caflm({"generate", "--worker", "127.0.0.1:" + std::to_string(silent.port()),
                       "--prompt", "hi", "--connect-timeout", "1"});
  check_clean_failure(run, "127.0.0.1:" + std::to_string(silent.port()));
  CHECK(run.err.find("no answer") != std::string::npos);
}

TEST_CASE("replicas that cannot fit in memory are refused before anything is allocated") {
  Run run = run_caflm({"generate", "--model", small_model(), "--prompt", "hi", "--replicas",
                       "100000", "--kv-cache-mb", "1024"});
  check_clean_failure(run, "100000 replica(s) need");
}

TEST_CASE("make-test-model refuses a model too large to build, before trying") {
  TempDir dir;
  auto make = [&](const std::string& name, const std::string& dim, const std::string& layers,
                  const std::string& heads, const std::string& ffn) {
    return run_caflm({"make-test-model", "--out", (dir / name).string(), "--arch", "llama", "--dim",
                      dim, "--layers", layers, "--heads", heads, "--kv-heads", heads, "--ffn", ffn,
                      "--type", "f32", "--seed", "1"});
  };
  // 100 layers of 65536 x 65536: terabytes, once killed the process.
  check_clean_failure(make("big.gguf", "65536", "100", "1", "65536"), "of memory");
  CHECK_FALSE(fs::exists(dir / "big.gguf"));
  // Sizes whose byte count overflows 64 bits.
  check_clean_failure(make("huge.gguf", "4294967294", "4294967295", "1", "4294967295"),
                      "overflows");
}

TEST_CASE("a model whose header claims a context of 2^32-1 runs within its KV budget") {
  TempDir dir;
  const std::string model = (dir / "huge-context.gguf").string();
  REQUIRE(make_small_model(model, {"llama", "f32", "128", "5", {"--context", "4294967295"}})
              .exit_code == 0);
  Run run = run_caflm({"generate", "--model", model, "--prompt", "hi", "--max-tokens", "3",
                       "--kv-cache-mb", "16", "--json", "--ignore-eos"});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(nlohmann::json::parse(run.out)["tokens"].size() == 3);
}

TEST_CASE("bench refuses sizes the context cannot hold, and sizes that overflow") {
  check_clean_failure(run_caflm({"bench", "--model", small_model(), "--prompt-tokens", "4294967295",
                                 "--gen-tokens", "2"}),
                      "context");
  check_clean_failure(run_caflm({"bench", "--model", small_model(), "--prompt-tokens", "2000",
                                 "--gen-tokens", "100"}),
                      "the model's holds 2048");
}

TEST_CASE("a prompt longer than the KV cache holds is refused, not failed mid-way") {
  // 1 MiB holds 128 blocks of 16 for this model: 2048 tokens, its context.
  // With --max-context 64, a prompt of more is refused with the reason.
  std::string prompt;
  for (int i = 0; i < 100; ++i)
    prompt += "word ";
  Run run = run_caflm({"generate", "--model", small_model(), "--prompt", prompt, "--max-context",
                       "64", "--max-tokens", "4"});
  check_clean_failure(run, "context_length_exceeded");
}
