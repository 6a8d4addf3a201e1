// Definitions the fuzz targets' sources refer to but never call, from
// caflm/engine/inference_engine.cpp, which would bring the whole engine (and
// its backends) into every target: CAF refers to to_string(FinishReason) to
// print a message, and the OpenAI protocol to write a response's
// finish_reason; the targets only load messages and parse requests.

#include "caflm/engine/inference_engine.hpp"

namespace caflm {

const char* to_string(FinishReason) {
  return "finish reason (fuzz stub)";
}

} // namespace caflm
