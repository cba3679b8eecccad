#include "loadgen/plot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace pdserve::loadgen {
namespace {

constexpr size_t kMaxCdfPoints = 2000;

// Sorted latencies as "value fraction" rows, thinned to kMaxCdfPoints quantiles.
bool write_cdf(const std::string& path, std::vector<double> v) {
  std::ofstream out(path);
  std::sort(v.begin(), v.end());
  if (v.size() <= kMaxCdfPoints) {
    for (size_t i = 0; i < v.size(); ++i) out << v[i] << " " << static_cast<double>(i + 1) / v.size() << "\n";
  } else {
    for (size_t k = 1; k <= kMaxCdfPoints; ++k) {
      const double q = static_cast<double>(k) / kMaxCdfPoints;
      out << percentile_sorted(v, q * 100.0) << " " << q << "\n";
    }
  }
  return !v.empty();
}

// A gnuplot single-quoted string ('' is a literal quote).
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Runs `gnuplot script`; returns its exit status and fills `err` with its stderr.
int run_gnuplot(const std::string& script, const std::string& err_path, std::string* err) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    *err = std::string("fork: ") + std::strerror(errno);
    return -1;
  }
  if (pid == 0) {
    const int fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDERR_FILENO);
      ::dup2(fd, STDOUT_FILENO);
      ::close(fd);
    }
    ::execlp("gnuplot", "gnuplot", script.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "cannot run gnuplot: %s (install gnuplot-nox)\n", std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  *err = ss.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string panel(const std::string& file, bool has_data, const std::string& title, const std::string& xlabel,
                  const char* color) {
  std::ostringstream s;
  s << "set title " << quote(title) << "\nset xlabel " << quote(xlabel) << "\nset ylabel 'fraction'\n"
    << "set yrange [0:1]\nset xrange [0:*]\n";
  if (has_data) {
    s << "plot " << quote(file) << " using 1:2 with steps lw 2 lc rgb '" << color << "' notitle\n";
  } else {
    s << "set label 9 'no data' at graph 0.5, 0.5 center\nset xrange [0:1]\nplot NaN notitle\nunset label 9\n";
  }
  return s.str();
}

}  // namespace

Status write_plot(const BenchReport& r, const std::string& png_path) {
  char tmpl[] = "/tmp/pdserve-bench-plot-XXXXXX";
  if (!::mkdtemp(tmpl)) return Status::Internal(std::string("mkdtemp: ") + std::strerror(errno));
  const std::filesystem::path dir(tmpl);
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};

  std::vector<double> ttft, tpot, itl, e2e;
  for (size_t i = 0; i < r.records.size(); ++i) {
    const RequestRecord& rec = r.records[i];
    if (!rec.ok) continue;
    const RequestMetrics m = request_metrics(rec, i < r.expected_input.size() ? r.expected_input[i] : 0);
    ttft.push_back(m.ttft_s * 1000);
    e2e.push_back(m.e2e_s * 1000);
    if (m.tpot_s) tpot.push_back(*m.tpot_s * 1000);
    for (size_t k = 1; k < rec.chunk_s.size(); ++k) itl.push_back((rec.chunk_s[k] - rec.chunk_s[k - 1]) * 1000);
  }
  const std::string f_ttft = (dir / "ttft.dat").string(), f_tpot = (dir / "tpot.dat").string(),
                    f_itl = (dir / "itl.dat").string(), f_e2e = (dir / "e2e.dat").string(),
                    f_tl = (dir / "timeline.dat").string(), f_script = (dir / "plot.gp").string();
  const bool h_ttft = write_cdf(f_ttft, ttft), h_tpot = write_cdf(f_tpot, tpot), h_itl = write_cdf(f_itl, itl),
             h_e2e = write_cdf(f_e2e, e2e);
  const Timeline tl = timeline(r.records, r.expected_input);
  {
    std::ofstream out(f_tl);
    for (size_t i = 0; i < tl.t_s.size(); ++i)
      out << tl.t_s[i] << " " << tl.output_tok_per_s[i] << " " << tl.completed_per_s[i] << " " << tl.in_flight[i]
          << " " << tl.prompt_tok_per_s[i] << "\n";
  }
  char bin_buf[32];
  std::snprintf(bin_buf, sizeof(bin_buf), "%g", tl.bin_s);
  const std::string bin_label = bin_buf;
  const Summary& s = r.summary;
  char stats[256];
  std::snprintf(stats, sizeof(stats), "%zu completed, %zu failed in %.1f s: %.2f req/s, %.0f output tok/s",
                s.completed, s.failed, s.duration_s, s.request_throughput, s.output_throughput);

  auto script = [&](const std::string& terminal) {
    std::ostringstream g;
    g << "set terminal " << terminal << " size 1200,900\n"
      << "set termoption noenhanced\n"
      << "set output " << quote(png_path) << "\n"
      << "set grid\nset key top left\n"
      << "set multiplot title " << quote("pdserve bench: " + r.workload) << ".\"\\n\"." << quote(stats) << "\n";
    // Four CDFs in a 2x2 grid above two throughput-over-time panels.
    const double w = 0.5, h = 0.31, top = 0.93;
    auto at = [&](int row, int col) {
      std::ostringstream o;
      o << "set size " << w << "," << h << "\nset origin " << col * w << "," << top - (row + 1) * h << "\n";
      return o.str();
    };
    g << at(0, 0) << panel(f_ttft, h_ttft, "TTFT CDF", "time to first token (ms)", "#1f77b4");
    g << at(0, 1) << panel(f_tpot, h_tpot, "TPOT CDF", "time per output token (ms)", "#ff7f0e");
    g << at(1, 0) << panel(f_itl, h_itl, "ITL CDF", "inter-token latency (ms)", "#2ca02c");
    g << at(1, 1) << panel(f_e2e, h_e2e, "E2E latency CDF", "end-to-end latency (ms)", "#d62728");
    g << "set xlabel 'time since start (s)'\nset xrange [0:*]\nset yrange [0:*]\nset y2range [0:*]\n"
      << "set ytics nomirror\nset y2tics\n";
    g << at(2, 0) << "set title " << quote("output tokens/s over time (" + bin_label + " s bins)") << "\n"
      << "set ylabel 'output tokens/s'\nset y2label 'requests in flight (bin mean)'\n"
      << "plot " << quote(f_tl) << " using 1:2 with lines lw 2 lc rgb '#9467bd' title 'output tok/s', "
      << quote(f_tl) << " using 1:4 axes x1y2 with steps lw 1 lc rgb '#7f7f7f' title 'in flight'\n";
    g << at(2, 1) << "set title " << quote("prompt tokens/s and completions over time") << "\n"
      << "set ylabel 'prompt tokens/s (at first token)'\nset y2label 'completed requests/s'\n"
      << "plot " << quote(f_tl) << " using 1:5 with lines lw 2 lc rgb '#17becf' title 'prompt tok/s', "
      << quote(f_tl) << " using 1:3 axes x1y2 with steps lw 1 lc rgb '#7f7f7f' title 'completed/s'\n";
    g << "unset multiplot\n";
    return g.str();
  };
  std::string err;
  for (const char* term : {"pngcairo noenhanced font 'sans,10'", "png"}) {
    {
      std::ofstream out(f_script);
      out << script(term);
    }
    const int rc = run_gnuplot(f_script, (dir / "gnuplot.err").string(), &err);
    if (rc == 127) return Status::NotFound("gnuplot not found (install gnuplot-nox): " + err);
    if (rc == 0 && std::filesystem::exists(png_path) && std::filesystem::file_size(png_path) > 0) return Status::Ok();
  }
  return Status::Internal("gnuplot failed: " + err);
}

}  // namespace pdserve::loadgen
