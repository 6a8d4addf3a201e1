#include "caflm/kv/kv_error.hpp"

namespace caflm {

const char* to_string(KvError error) {
  switch (error) {
  case KvError::Exhausted:
    return "KV block pool exhausted";
  case KvError::InvalidBlock:
    return "invalid KV block";
  case KvError::DoubleRelease:
    return "KV block released twice";
  case KvError::ReferenceOverflow:
    return "KV block reference count overflow";
  case KvError::PageOutOfRange:
    return "logical page out of range";
  case KvError::TableNotEmpty:
    return "block table is not empty";
  }
  return "unknown KV error";
}

} // namespace caflm
