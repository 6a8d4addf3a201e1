#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace caflm::apps {

/// One line of progress for long work, redrawn in place on standard error
/// when that is a terminal and nothing at all otherwise, so that logs and
/// JSON on standard output never see it. Redraws at most ten times a second.
class ProgressLine {
 public:
  /// Writes to `stream` if it is a terminal.
  explicit ProgressLine(std::FILE* stream = stderr);
  ~ProgressLine();

  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool enabled() const { return stream_ != nullptr; }

  /// Shows `text`, unless the last redraw was under 100 ms ago and `force`
  /// is false.
  void show(const std::string& text, bool force = false);
  /// Erases the line, so that other output starts on a clean one; the next
  /// show() draws it again.
  void clear();

 private:
  std::FILE* stream_ = nullptr;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

} // namespace caflm::apps
