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
  /// and the returned text ends right before the stop string. With `may_stop` false (before
  /// min_tokens), a stop string completed now is passed over: emitted, never matched later;
  /// a stop string's beginning is still held back, so one that ends in text fed later with
  /// `may_stop` (vLLM: a stop that ends in the newer text) is cut where it begins.
  std::string feed(std::string_view text, bool may_stop = true);
  /// Returns the held-back text (call when generation ends without a match).
  std::string flush();
  /// Appends `text` unchecked (a stop id's text at the end): returns it with anything held back.
  std::string pass(std::string_view text);
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace pdserve::engine
