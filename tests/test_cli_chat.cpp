// `caflm chat` and `caflm template` as a user drives them: turns rendered with
// the chat template and the history kept, Ctrl-C stopping an answer but not
// the chat, Ctrl-D leaving; a message file rendered, and bad ones refused.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/support/cli_harness.hpp"

using namespace caflm::testing;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// `caflm ARGS...` run directly (so that signals reach it), its stdin and
/// stdout on pipes the test drives a line at a time.
class InteractiveRun {
 public:
  explicit InteractiveRun(const std::vector<std::string>& args) {
    int in[2];
    int out[2];
    REQUIRE(::pipe(in) == 0);
    REQUIRE(::pipe(out) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDERR_FILENO);
      ::close(in[1]);
      ::close(out[0]);
      std::vector<char*> argv{const_cast<char*>(CAFLM_BINARY)};
      for (const std::string& arg : args)
        argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv(CAFLM_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  InteractiveRun(const InteractiveRun&) = delete;
  InteractiveRun& operator=(const InteractiveRun&) = delete;
  ~InteractiveRun() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    close_stdin();
    ::close(stdout_);
  }

  void write_line(const std::string& line) {
    const std::string text = line + "\n";
    REQUIRE(::write(stdin_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  }
  void close_stdin() {
    if (stdin_ >= 0)
      ::close(stdin_);
    stdin_ = -1;
  }
  void interrupt() { REQUIRE(::kill(pid_, SIGINT) == 0); }

  /// Reads until the output holds `what` `times` times; false if the
  /// output ends or a minute passes first.
  bool wait_for(const std::string& what, std::size_t times = 1) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (count(output_, what) < times) {
      if (std::chrono::steady_clock::now() > give_up || !read_some())
        return false;
    }
    return true;
  }
  /// Reads until the output has grown by `bytes`.
  bool wait_for_bytes(std::size_t bytes) {
    const std::size_t target = output_.size() + bytes;
    while (output_.size() < target)
      if (!read_some())
        return false;
    return true;
  }

  /// Waits for the exit; the exit status, or -1 for a signal or a hang.
  int finish() {
    while (read_some()) {
    }
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& output() const { return output_; }

 private:
  bool read_some() {
    pollfd ready{stdout_, POLLIN, 0};
    if (::poll(&ready, 1, 60000) <= 0)
      return false;
    char buffer[4096];
    const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
    if (n <= 0)
      return false;
    output_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string output_;
};

} // namespace

TEST_CASE("chat renders each turn with the template and keeps the history") {
  TempDir dir;
  const std::string model = (dir / "chat.gguf").string();
  REQUIRE(make_small_model(model).exit_code == 0);
  const Run run = run_caflm({"chat", "--model", model, "--device", "cpu", "--chat-template",
                             "chatml", "--system", "Be brief.", "--show-prompt", "--temperature",
                             "0", "--max-tokens", "4", "--ignore-eos"},
                            "first question\nsecond \\\nquestion\n");
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  // Two answers, each after a prompt, and a last prompt that met the end.
  // (--device cpu: nothing else, not even the note that auto found no GPU,
  // comes before the first prompt on standard error.)
  CHECK(count(run.out, "> ") >= 3);
  const std::string first = "<|im_start|>system\nBe brief.<|im_end|>\n"
                            "<|im_start|>user\nfirst question<|im_end|>\n"
                            "<|im_start|>assistant\n";
  REQUIRE(run.err.find(first) == 0);
  // The second prompt holds the first exchange, the answer as generated,
  // and the message continued over two lines.
  const std::size_t second = run.err.find(first, first.size());
  REQUIRE(second != std::string::npos);
  const std::string after = run.err.substr(second + first.size());
  const std::size_t end_of_answer = after.find("<|im_end|>\n");
  REQUIRE(end_of_answer != std::string::npos);
  const std::string answer = after.substr(0, end_of_answer);
  CHECK(run.out.find(answer) != std::string::npos);
  CHECK(after.substr(end_of_answer) ==
        "<|im_end|>\n<|im_start|>user\nsecond \nquestion<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("a conversation that outgrows the context leaves out its oldest exchanges") {
  TempDir dir;
  const std::string model = (dir / "short.gguf").string();
  REQUIRE(make_small_model(model, {"llama", "f32", "128", "1", {"--context", "128"}}).exit_code ==
          0);
  // Each message is about 40 tokens: the third turn no longer fits with
  // the first two.
  std::string input;
  for (const char* topic : {"apples", "boats", "clouds", "dunes"})
    input += std::string("tell me about ") + topic +
             " and everything you know about them in great detail please\n";
  const Run run =
      run_caflm({"chat", "--model", model, "--chat-template", "chatml", "--system", "Be brief.",
                 "--show-prompt", "--temperature", "0", "--max-tokens", "6", "--ignore-eos"},
                input);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.find("oldest exchange is left out") != std::string::npos);
  CHECK(run.err.find("context_length_exceeded") == std::string::npos);
  // The last prompt sent keeps the system prompt and the last question, and
  // has left out the first.
  const std::string last = run.err.substr(run.err.rfind("<|im_start|>system"));
  CHECK(last.find("Be brief.") != std::string::npos);
  CHECK(last.find("dunes") != std::string::npos);
  CHECK(last.find("apples") == std::string::npos);
}

TEST_CASE("Ctrl-C stops the answer, not the chat; Ctrl-D leaves") {
  TempDir dir;
  const std::string model = (dir / "long.gguf").string();
  // A context long enough that the answer is still streaming when stopped.
  REQUIRE(make_small_model(model, {"llama", "f32", "128", "1", {"--context", "65536"}}).exit_code ==
          0);
  InteractiveRun chat({"chat", "--model", model, "--chat-template", "chatml", "--max-tokens",
                       "60000", "--ignore-eos", "--temperature", "0"});
  REQUIRE(chat.wait_for("> "));
  chat.write_line("tell me everything");
  REQUIRE(chat.wait_for_bytes(64));
  chat.interrupt();
  // The next prompt comes: the chat goes on.
  REQUIRE(chat.wait_for("> ", 2));
  chat.close_stdin();
  CHECK(chat.finish() == 0);
}

TEST_CASE("chat refuses an unknown template, naming the ones it has") {
  TempDir dir;
  const std::string model = (dir / "chat.gguf").string();
  REQUIRE(make_small_model(model).exit_code == 0);
  check_clean_failure(run_caflm({"chat", "--model", model, "--chat-template", "no-such-format"}),
                      "chatml");
}

TEST_CASE("template prints a message file as the chosen template renders it") {
  TempDir dir;
  const std::string model = (dir / "chat.gguf").string();
  REQUIRE(make_small_model(model).exit_code == 0);
  const std::string messages = (dir / "messages.json").string();
  std::ofstream(messages) << R"([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi \"there\""},
                                 {"role": "assistant", "content": "Hello."},
                                 {"role": "user", "content": "Bye"}])";
  const std::string turns = "<|im_start|>system\nBe brief.<|im_end|>\n"
                            "<|im_start|>user\nHi \"there\"<|im_end|>\n"
                            "<|im_start|>assistant\nHello.<|im_end|>\n"
                            "<|im_start|>user\nBye<|im_end|>\n";
  const Run open = run_caflm(
      {"template", "--model", model, "--messages", messages, "--chat-template", "chatml"});
  INFO(describe(open));
  CHECK(open.exit_code == 0);
  CHECK(open.out == turns + "<|im_start|>assistant\n");
  const Run closed = run_caflm({"template", "--model", model, "--messages", "-", "--chat-template",
                                "chatml", "--no-generation-prompt"},
                               read_file(messages));
  CHECK(closed.out == turns);

  // A model without a template of its own, bad JSON, a message without a role.
  check_clean_failure(run_caflm({"template", "--model", model, "--messages", messages}),
                      "--chat-template");
  std::ofstream(messages) << "[{\"role\": ";
  check_clean_failure(run_caflm({"template", "--model", model, "--messages", messages,
                                 "--chat-template", "chatml"}),
                      "not JSON");
  std::ofstream(messages) << R"([{"content": "no role"}])";
  check_clean_failure(run_caflm({"template", "--model", model, "--messages", messages,
                                 "--chat-template", "chatml"}),
                      "role");
}
