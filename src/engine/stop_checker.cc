#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

namespace pdserve::engine {

StopChecker::StopChecker(std::vector<std::string> stops, bool include_stop) : include_stop_(include_stop) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopChecker::feed(std::string_view text, bool may_stop) {
  if (stopped_) return {};
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, {});
  // Earliest full match of any stop string ends generation.
  size_t first = std::string::npos, end = 0;
  for (const auto& s : stops_)
    if (const size_t at = pending_.find(s); at < first) {
      first = at;
      end = at + s.size();
    }
  std::string passed;  // before min_tokens: text through the last complete match, emitted as is
  if (!may_stop) {
    size_t last_end = 0;
    for (const auto& s : stops_)
      for (size_t at = pending_.find(s); at != std::string::npos; at = pending_.find(s, at + 1))
        last_end = std::max(last_end, at + s.size());
    passed = pending_.substr(0, last_end);
    pending_.erase(0, last_end);
    first = std::string::npos;
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, include_stop_ ? end : first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = passed + pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopChecker::flush() { return std::exchange(pending_, {}); }

std::string StopChecker::pass(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  return std::exchange(pending_, {});
}

}  // namespace pdserve::engine
