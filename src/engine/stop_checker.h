// Stop strings matched on generated text across token boundaries (OpenAI `stop`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pdserve::engine {

/// Holds back any text that could be the start of a stop string, so a matched stop
/// string (and what follows it) is never emitted; the text before it is.
class StopChecker {
 public:
  /// `include_stop`: a matched stop string is returned too (vLLM's include_stop_str_in_output).
  explicit StopChecker(std::vector<std::string> stops, bool include_stop = false);
  /// Appends `text`; returns what is now safe to emit. After a match, stopped() is true
  /// and the returned text ends right before the stop string.
  std::string feed(std::string_view text);
  /// Returns the held-back text (call when generation ends without a match).
  std::string flush();
  /// Appends `text` unchecked (before min_tokens): returns it with anything held back.
  std::string pass(std::string_view text);
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace pdserve::engine
