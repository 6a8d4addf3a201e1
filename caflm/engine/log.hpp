#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace caflm {

/// How much the operator log says. It reports what an operator acts on
/// (preemptions, lost and recovered workers, refusals, faults), one line
/// each, never per token.
enum class LogLevel : std::uint8_t { Debug, Info, Warning, Error, Off };

/// "debug", "info", "warning", "error", "off".
const char* to_string(LogLevel level);

/// Where log lines go. The default writes "caflm LEVEL: message" to
/// standard error; a program that embeds caflm can take the lines into its
/// own log. Called from any thread, one line at a time.
using LogSink = std::function<void(LogLevel, std::string_view message)>;

/// Lines below `level` are dropped (the default is Warning).
void set_log_level(LogLevel level);
LogLevel log_level();
/// Replaces the sink; an empty one restores the default.
void set_log_sink(LogSink sink);

bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message);

/// `bytes` as an operator reads them: "812.0 KiB", "1.5 GiB".
std::string human_bytes(std::uint64_t bytes);

/// Formats (with fmt) only when `level` is enabled.
template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level))
    log(level, std::string_view(fmt::format(format, std::forward<Args>(args)...)));
}

} // namespace caflm
