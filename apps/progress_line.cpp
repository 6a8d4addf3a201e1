#include "apps/progress_line.hpp"

#include <unistd.h>

namespace caflm::apps {

ProgressLine::ProgressLine(std::FILE* stream) {
  if (stream != nullptr && ::isatty(::fileno(stream)) == 1)
    stream_ = stream;
}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::show(const std::string& text, bool force) {
  if (!stream_)
    return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && !force && now - last_draw_ < std::chrono::milliseconds(100))
    return;
  // Carriage return and "erase line": the text replaces the last one.
  std::fprintf(stream_, "\r\x1b[2K%s", text.c_str());
  std::fflush(stream_);
  drawn_ = true;
  last_draw_ = now;
}

void ProgressLine::clear() {
  if (!stream_ || !drawn_)
    return;
  std::fputs("\r\x1b[2K", stream_);
  std::fflush(stream_);
  drawn_ = false;
}

} // namespace caflm::apps
