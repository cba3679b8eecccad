#include "loadgen/sse_parser.h"

namespace pdserve::loadgen {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> out;
  buf_.append(bytes);
  size_t start = 0;
  while (true) {
    const size_t eol = buf_.find_first_of("\r\n", start);
    if (eol == std::string::npos) break;
    // A '\r' at the very end may be the first half of "\r\n": wait for the next byte.
    if (buf_[eol] == '\r' && eol + 1 == buf_.size()) break;
    line(std::string_view(buf_).substr(start, eol - start), out);
    start = eol + ((buf_[eol] == '\r' && buf_[eol + 1] == '\n') ? 2 : 1);
  }
  buf_.erase(0, start);
  return out;
}

void SseParser::line(std::string_view l, std::vector<std::string>& out) {
  if (l.empty()) {  // dispatch
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment / keep-alive
  const size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

}  // namespace pdserve::loadgen
