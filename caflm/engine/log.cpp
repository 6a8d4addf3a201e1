#include "caflm/engine/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace caflm {

namespace {

std::atomic<LogLevel> threshold{LogLevel::Warning};
std::mutex sink_mutex;
LogSink sink; // guarded by sink_mutex; empty: standard error

} // namespace

const char* to_string(LogLevel level) {
  switch (level) {
  case LogLevel::Debug:
    return "debug";
  case LogLevel::Info:
    return "info";
  case LogLevel::Warning:
    return "warning";
  case LogLevel::Error:
    return "error";
  case LogLevel::Off:
    return "off";
  }
  return "unknown";
}

void set_log_level(LogLevel level) {
  threshold.store(level, std::memory_order_relaxed);
}

LogLevel log_level() {
  return threshold.load(std::memory_order_relaxed);
}

void set_log_sink(LogSink new_sink) {
  std::lock_guard<std::mutex> guard(sink_mutex);
  sink = std::move(new_sink);
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::Off && level >= log_level();
}

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level))
    return;
  std::lock_guard<std::mutex> guard(sink_mutex);
  if (sink) {
    sink(level, message);
    return;
  }
  // One write per line, so lines of different threads never interleave.
  std::string line = "caflm ";
  line += to_string(level);
  line += ": ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string human_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t kib = 1024, mib = kib << 10, gib = mib << 10, tib = gib << 10;
  if (bytes >= tib)
    return fmt::format("{:.1f} TiB", double(bytes) / double(tib));
  if (bytes >= gib)
    return fmt::format("{:.1f} GiB", double(bytes) / double(gib));
  if (bytes >= mib)
    return fmt::format("{:.1f} MiB", double(bytes) / double(mib));
  return fmt::format("{:.1f} KiB", double(bytes) / double(kib));
}

} // namespace caflm
