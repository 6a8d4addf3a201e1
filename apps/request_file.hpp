#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "caflm/messages/messages.hpp"

// The JSONL request files of `caflm generate --requests`: one JSON object
// per line, checked field by field.

namespace caflm::apps {

/// Every field a request line may have, and what it takes, for --help.
extern const char* const kRequestFileHelp;

/// One line of a request file, read.
struct RequestLine {
  /// The line's "id" as given (any JSON scalar), or its line number.
  nlohmann::json id;
  GenerateRequest request;
};

/// Reads one request line; `defaults` (the command line's sampling options)
/// fill what the line leaves out. Throws std::invalid_argument naming the
/// line and the field for anything wrong: not an object, an unknown or
/// misspelt field, a value of the wrong type or out of range.
RequestLine parse_request_line(const std::string& line, std::size_t line_number,
                               const SamplingParams& defaults);

} // namespace caflm::apps
