#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace caflm {

/// Finds stop strings in streamed text. Text that might still turn into a
/// stop string is held back, so the stop text itself is never emitted.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  /// Takes the next piece of text; returns what may be emitted now. After a
  /// stop string appears, `stopped()` is true and the text before it was the
  /// last to be returned.
  std::string push(std::string_view text);

  /// The end of the stream: returns the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

} // namespace caflm
