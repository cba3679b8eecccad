// Incremental parser for `text/event-stream` bodies (the framing of streamed OpenAI
// responses): bytes go in as the network delivers them, complete events' data come out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pdserve::loadgen {

class SseParser {
 public:
  /// Appends bytes and returns the `data` of every event completed by them (an event ends at
  /// a blank line; several data lines are joined with '\n'; comments and other fields are
  /// skipped). Lines may end in "\n", "\r\n" or "\r".
  std::vector<std::string> feed(std::string_view bytes);

 private:
  void line(std::string_view l, std::vector<std::string>& out);
  std::string buf_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace pdserve::loadgen
