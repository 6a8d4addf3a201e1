#pragma once

// Runs the `caflm` command as a user does, in a shell, with stdout and
// stderr captured, for tests of its behaviour and of its error messages.

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace caflm::testing {

namespace fs = std::filesystem;

/// What one run of the command did.
struct Run {
  /// The exit status; -1 when it did not exit normally.
  int exit_code = -1;
  /// Killed by a signal (a crash, an abort or the time limit).
  bool crashed = false;
  std::string out;
  std::string err;
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// `text` as one word for /bin/sh: in single quotes, each ' written '\''.
inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// A fresh directory, removed with this object.
class TempDir {
 public:
  TempDir()
    : path_(fs::temp_directory_path() / ("caflm-cli-test-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(next_number_++))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  static inline int next_number_ = 0;
  fs::path path_;
};

/// A run of `caflm ARGS...` (CAFLM_BINARY) going on in the background, with
/// `stdin_text` on its standard input and stdout and stderr captured. A
/// run that hangs is killed after two minutes and reported as crashed.
class CaflmRun {
 public:
  explicit CaflmRun(const std::vector<std::string>& args, const std::string& stdin_text = {}) {
    std::string command = "timeout -k 5 120 " + shell_quote(CAFLM_BINARY);
    for (const std::string& arg : args)
      command += " " + shell_quote(arg);
    command += " 2>" + shell_quote((dir_ / "stderr").string());
    std::ofstream(dir_ / "stdin", std::ios::binary) << stdin_text;
    command += " <" + shell_quote((dir_ / "stdin").string());
    pipe_ = ::popen(command.c_str(), "r");
    REQUIRE(pipe_ != nullptr);
  }
  CaflmRun(const CaflmRun&) = delete;
  CaflmRun& operator=(const CaflmRun&) = delete;
  ~CaflmRun() {
    if (pipe_ != nullptr)
      ::pclose(pipe_);
  }

  /// Waits for the run to end.
  Run finish() {
    Run run;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe_)) > 0;)
      run.out.append(buffer, n);
    const int status = ::pclose(pipe_);
    pipe_ = nullptr;
    // The shell reports a child killed by signal S as exit status 128 + S,
    // and timeout as 124.
    if (WIFEXITED(status)) {
      run.exit_code = WEXITSTATUS(status);
      run.crashed = run.exit_code > 128 || run.exit_code == 124;
    } else {
      run.crashed = true;
    }
    run.err = read_file(dir_ / "stderr");
    return run;
  }

 private:
  TempDir dir_;
  std::FILE* pipe_ = nullptr;
};

/// Runs `caflm ARGS...` to its end.
inline Run run_caflm(const std::vector<std::string>& args, const std::string& stdin_text = {}) {
  return CaflmRun(args, stdin_text).finish();
}

/// The shape `make_small_model` writes: 64 wide, 2 layers, 4 query heads
/// over 2 KV heads, the built-in byte-level BPE vocabulary.
struct SmallModel {
  std::string arch = "llama";
  std::string type = "f32";
  std::string ffn = "128";
  std::string seed = "1";
  /// More options (--context, --tied, ...).
  std::vector<std::string> extra;
};

/// Runs `caflm make-test-model` for a small model at `out`.
inline Run make_small_model(const std::string& out, const SmallModel& shape = {}) {
  std::vector<std::string> args{
      "make-test-model", "--out",  out,        "--arch", shape.arch,   "--dim", "64",
      "--layers",        "2",      "--heads",  "4",      "--kv-heads", "2",     "--ffn",
      shape.ffn,         "--type", shape.type, "--seed", shape.seed};
  args.insert(args.end(), shape.extra.begin(), shape.extra.end());
  return run_caflm(args);
}

inline std::string describe(const Run& run) {
  std::ostringstream out;
  out << "exit " << run.exit_code << (run.crashed ? " (crashed)" : "") << "\nstdout: " << run.out
      << "\nstderr: " << run.err;
  return out.str();
}

/// A failed run that said why, on one line of stderr, and did not crash.
inline void check_clean_failure(const Run& run, const std::string& should_mention) {
  INFO(describe(run));
  CHECK_FALSE(run.crashed);
  CHECK(run.exit_code > 0);
  CHECK(run.out.empty());
  CHECK(run.err.find(should_mention) != std::string::npos);
  CHECK(run.err.find("terminate called") == std::string::npos);
}

} // namespace caflm::testing
