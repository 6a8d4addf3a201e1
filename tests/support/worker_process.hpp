#pragma once

// A `caflm worker` child process for multi-process tests: started with its
// stdout on a pipe, its port read from the line it prints, and always
// reaped, whatever the test does to it (kill, stop, continue, terminate).

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace caflm::testing {

class WorkerProcess {
 public:
  /// Starts `binary worker --model model --host 127.0.0.1 --port port
  /// EXTRA...` (with --kv-cache-mb 64 unless EXTRA sets it) and waits up to
  /// `startup_timeout` for its "listening" line. Port 0 lets
  /// the worker pick one; `port()` tells which. Its OpenMP runtime gets one
  /// thread: tests run several workers on two shared cores, and the kernels'
  /// results do not depend on the thread count. Throws std::runtime_error
  /// (after reaping the child) when the worker does not come up.
  WorkerProcess(const std::string& binary, const std::string& model, std::uint16_t port = 0,
                std::chrono::milliseconds startup_timeout = std::chrono::seconds(20),
                const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{binary,   "worker", "--model", model,
                                  "--host", host_,    "--port",  std::to_string(port)};
    if (std::find(extra.begin(), extra.end(), "--kv-cache-mb") == extra.end())
      args.insert(args.end(), {"--kv-cache-mb", "64"});
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> env{"OMP_NUM_THREADS=1"};
    for (char** e = environ; *e != nullptr; ++e)
      if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0)
        env.emplace_back(*e);
    // Everything the child needs is built before fork: between fork and
    // exec a child of a multi-threaded parent may only make system calls.
    std::vector<char*> argv = pointers(args);
    std::vector<char*> envp = pointers(env);

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid_ == 0) {
      // dup2 clears close-on-exec on the new stdout; every other descriptor
      // of the parent (its actor system's sockets) stays behind.
      ::dup2(fds[1], STDOUT_FILENO);
      ::close_range(3, ~0U, 0);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    stdout_ = fds[0];
    try {
      port_ = read_port(startup_timeout);
    } catch (...) {
      kill();
      ::close(stdout_);
      throw;
    }
  }

  /// Kills the worker if it still runs, and reaps it.
  ~WorkerProcess() {
    kill();
    ::close(stdout_);
  }

  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  /// "127.0.0.1:PORT", as ClusterOptions::workers takes it.
  std::string address() const { return host_ + ":" + std::to_string(port_); }

  /// Whether the process still runs (it has not exited or been killed).
  bool running() {
    if (pid_ <= 0)
      return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_ && !WIFSTOPPED(status)) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  /// SIGKILL, then reap. Does nothing once the worker is gone.
  void kill() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    reap();
  }

  /// SIGSTOP, and waits until the worker has stopped: the signal takes
  /// effect a little later, on a loaded machine late enough for the worker
  /// to answer a few more messages. Stopped, it keeps its sockets open but
  /// answers nothing.
  void stop() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGSTOP);
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid_, &status, WUNTRACED)) < 0 && errno == EINTR) {
    }
    if (done == pid_ && !WIFSTOPPED(status))
      pid_ = -1; // it ended instead, and is reaped
  }
  /// SIGCONT after `stop`.
  void resume() {
    if (pid_ > 0)
      ::kill(pid_, SIGCONT);
  }

  /// SIGTERM, the worker's orderly shutdown; returns whether it exited with
  /// status 0 within `timeout` (it is killed otherwise). Either way it is
  /// reaped.
  bool terminate(std::chrono::milliseconds timeout) {
    if (pid_ <= 0)
      return false;
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    return false;
  }

 private:
  static std::vector<char*> pointers(std::vector<std::string>& strings) {
    std::vector<char*> out;
    for (std::string& s : strings)
      out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  }

  void reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  /// Reads stdout up to the first newline and returns the port it names.
  std::uint16_t read_port(std::chrono::milliseconds timeout) {
    const std::string prefix = "caflm worker listening on " + host_ + ":";
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (line.empty() || line.back() != '\n') {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        throw std::runtime_error("caflm worker printed no port within " +
                                 std::to_string(timeout.count()) + " ms");
      pollfd readable{stdout_, POLLIN, 0};
      int ready = ::poll(&readable, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0)
        continue; // the deadline check above reports the timeout
      char c = 0;
      ssize_t n = ::read(stdout_, &c, 1);
      if (n == 0)
        throw std::runtime_error("caflm worker exited before listening; stdout: '" + line + "'");
      if (n < 0 && errno != EINTR)
        throw std::runtime_error(std::string("reading the worker's stdout: ") +
                                 std::strerror(errno));
      if (n == 1)
        line.push_back(c);
    }
    if (line.compare(0, prefix.size(), prefix) != 0)
      throw std::runtime_error("unexpected first line from caflm worker: '" + line + "'");
    return static_cast<std::uint16_t>(std::stoul(line.substr(prefix.size())));
  }

  std::string host_ = "127.0.0.1";
  pid_t pid_ = -1;
  int stdout_ = -1;
  std::uint16_t port_ = 0;
};

} // namespace caflm::testing
