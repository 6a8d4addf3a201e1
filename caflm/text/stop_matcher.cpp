#include "caflm/text/stop_matcher.hpp"

#include <algorithm>

namespace caflm {

StopMatcher::StopMatcher(std::vector<std::string> stops)
  : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string{}), stops_.end());
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_)
    return {};
  held_.append(text);
  // The earliest stop string wins.
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_)
    first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is the start of some stop string.
  std::size_t keep = 0;
  for (const std::string& stop : stops_) {
    std::size_t max_len = std::min(stop.size() - 1, held_.size());
    for (std::size_t len = max_len; len > keep; --len)
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string{} : out;
}

} // namespace caflm
