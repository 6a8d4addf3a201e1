#include "caflm/messages/messages.hpp"

namespace caflm {

const char* to_string(InferenceErrorCode code) {
  switch (code) {
  case InferenceErrorCode::backpressure:
    return "backpressure";
  case InferenceErrorCode::bad_request:
    return "bad_request";
  case InferenceErrorCode::context_length_exceeded:
    return "context_length_exceeded";
  case InferenceErrorCode::cancelled:
    return "cancelled";
  case InferenceErrorCode::engine_unavailable:
    return "engine_unavailable";
  case InferenceErrorCode::internal:
    return "internal";
  case InferenceErrorCode::engine_fault:
    return "engine_fault";
  case InferenceErrorCode::deadline_exceeded:
    return "deadline_exceeded";
  }
  return "unknown";
}

bool retryable(InferenceErrorCode code) {
  return code == InferenceErrorCode::backpressure ||
         code == InferenceErrorCode::engine_unavailable || code == InferenceErrorCode::engine_fault;
}

} // namespace caflm
