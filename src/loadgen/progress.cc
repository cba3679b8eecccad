#include "loadgen/progress.h"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace pdserve::loadgen {

ProgressBar::ProgressBar(std::FILE* out, int tty, double line_interval_s)
    : out_(out), tty_(tty < 0 ? ::isatty(::fileno(out)) == 1 : tty == 1), line_interval_s_(line_interval_s) {}

void ProgressBar::update(const ClientProgress& p) {
  if (!tty_ && p.elapsed_s - last_line_s_ < line_interval_s_) return;
  draw(p, false);
}

void ProgressBar::finish(const ClientProgress& p) {
  draw(p, true);
  if (tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressBar::draw(const ClientProgress& p, bool final) {
  constexpr int kWidth = 30;
  const double frac = p.total ? static_cast<double>(p.finished) / static_cast<double>(p.total) : 1.0;
  const int filled = std::clamp(static_cast<int>(frac * kWidth + 0.5), 0, kWidth);
  char line[256];
  const int n = std::snprintf(line, sizeof(line), "bench [%s%s] %zu/%zu done, %zu in flight, %zu failed, %lld chunks, %.1f s",
                              std::string(static_cast<size_t>(filled), '#').c_str(),
                              std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), p.finished, p.total,
                              p.in_flight, p.failed, static_cast<long long>(p.chunks), p.elapsed_s);
  if (tty_) {
    // \r, the line, and blanks over whatever a longer previous line left behind.
    std::fprintf(out_, "\r%s%*s", line, std::max(0, last_width_ - n), "");
    last_width_ = n;
  } else if (!final || p.elapsed_s != last_line_s_) {
    std::fprintf(out_, "%s\n", line);
  }
  last_line_s_ = p.elapsed_s;
  std::fflush(out_);
}

}  // namespace pdserve::loadgen
