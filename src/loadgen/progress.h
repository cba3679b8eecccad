// The progress display of `pdserve bench` on stderr: one updating bar on a terminal,
// plain periodic lines otherwise (logs, CI).
#pragma once

#include <cstdio>

#include "loadgen/stream_client.h"

namespace pdserve::loadgen {

class ProgressBar {
 public:
  /// `tty` < 0: decide by isatty(out); 0/1 force plain lines / the bar.
  explicit ProgressBar(std::FILE* out = stderr, int tty = -1, double line_interval_s = 5.0);
  /// Redraws the bar (TTY) or prints a line when line_interval_s passed (otherwise).
  void update(const ClientProgress& p);
  /// Final state and a newline.
  void finish(const ClientProgress& p);

 private:
  void draw(const ClientProgress& p, bool final);
  std::FILE* out_;
  bool tty_;
  double line_interval_s_;
  double last_line_s_ = -1e9;
  int last_width_ = 0;
};

}  // namespace pdserve::loadgen
