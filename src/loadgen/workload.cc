#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace pdserve::loadgen {
namespace {

std::string fmt_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

int64_t clamp_len(int64_t v, int64_t lo, int64_t cap) {
  v = std::max(v, lo);
  if (cap > 0) v = std::min(v, std::max(cap, lo));
  return v;
}

}  // namespace

int64_t scaled_block_tokens(double length_scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(kMooncakeBlockTokens) * length_scale));
}

Workload scale_trace(const std::vector<TraceEntry>& trace, TraceFormat format, const TraceScaling& s,
                     int64_t min_input) {
  Workload w;
  const bool hashed = format == TraceFormat::Mooncake;
  w.block_tokens = hashed ? scaled_block_tokens(s.length_scale) : 0;
  for (const TraceEntry& e : trace) {
    if (s.max_requests && w.items.size() >= s.max_requests) break;
    WorkItem it;
    it.arrival_s = e.timestamp_s * s.time_scale;
    if (s.duration_s > 0 && it.arrival_s >= s.duration_s) break;
    it.input_len = clamp_len(std::llround(static_cast<double>(e.input_len) * s.length_scale), min_input, s.max_input);
    it.output_len = clamp_len(std::llround(static_cast<double>(e.output_len) * s.length_scale), 1, s.max_output);
    if (hashed) {
      const size_t blocks = static_cast<size_t>((it.input_len + w.block_tokens - 1) / w.block_tokens);
      it.hash_ids.assign(e.hash_ids.begin(), e.hash_ids.begin() + std::min(blocks, e.hash_ids.size()));
    }
    w.items.push_back(std::move(it));
  }
  std::ostringstream d;
  d << trace_format_name(format) << " trace, " << w.items.size() << " requests; time x" << fmt_num(s.time_scale)
    << ", lengths x" << fmt_num(s.length_scale);
  if (hashed) d << " (hash block " << kMooncakeBlockTokens << " -> " << w.block_tokens << " tokens)";
  if (s.max_input) d << ", input <= " << s.max_input;
  if (s.max_output) d << ", output <= " << s.max_output;
  if (s.duration_s > 0) d << ", first " << fmt_num(s.duration_s) << " s";
  w.description = d.str();
  return w;
}

Result<LengthDist> LengthDist::parse(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  auto number = [](const std::string& s, double* v) {
    try {
      size_t pos = 0;
      *v = std::stod(s, &pos);
      return pos == s.size() && std::isfinite(*v);
    } catch (...) {
      return false;
    }
  };
  LengthDist d;
  const auto bad = Status::InvalidArgument("bad length distribution '" + spec +
                                 "' (expected N, uniform:LO:HI, normal:MEAN:STD or exp:MEAN)");
  if (parts.size() == 1) {
    if (!number(parts[0], &d.a) || d.a < 1) return bad;
    d.kind = Kind::Fixed;
  } else if (parts[0] == "uniform" && parts.size() == 3) {
    if (!number(parts[1], &d.a) || !number(parts[2], &d.b) || d.a < 1 || d.b < d.a) return bad;
    d.kind = Kind::Uniform;
  } else if (parts[0] == "normal" && parts.size() == 3) {
    if (!number(parts[1], &d.a) || !number(parts[2], &d.b) || d.a < 1 || d.b < 0) return bad;
    d.kind = Kind::Normal;
  } else if ((parts[0] == "exp" || parts[0] == "exponential") && parts.size() == 2) {
    if (!number(parts[1], &d.a) || d.a < 1) return bad;
    d.kind = Kind::Exponential;
  } else {
    return bad;
  }
  return d;
}

int64_t LengthDist::sample(std::mt19937_64& rng) const {
  double v = a;
  switch (kind) {
    case Kind::Fixed: break;
    case Kind::Uniform:
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(std::llround(a), std::llround(b))(rng));
      break;
    case Kind::Normal: v = std::normal_distribution<double>(a, b)(rng); break;
    case Kind::Exponential: v = std::exponential_distribution<double>(1.0 / a)(rng); break;
  }
  return std::max<int64_t>(1, std::llround(v));
}

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::Fixed: return fmt_num(a);
    case Kind::Uniform: return "uniform[" + fmt_num(a) + "," + fmt_num(b) + "]";
    case Kind::Normal: return "normal(" + fmt_num(a) + "," + fmt_num(b) + ")";
    case Kind::Exponential: return "exp(mean " + fmt_num(a) + ")";
  }
  return "?";
}

Workload make_synthetic(const SyntheticOptions& o, int64_t min_input) {
  Workload w;
  std::mt19937_64 rng(o.seed ^ 0x5DEECE66DULL);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  double t = 0;
  for (size_t i = 0; i < o.num_requests; ++i) {
    WorkItem it;
    if (o.rate > 0) {
      if (i > 0) t += gap(rng);
      if (o.duration_s > 0 && t >= o.duration_s) break;
      it.arrival_s = t;
    }
    const LengthDist* in = &o.input;
    const LengthDist* out = &o.output;
    if (!o.classes.empty()) {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      double acc = 0;
      it.cls = static_cast<int>(o.classes.size()) - 1;
      for (size_t c = 0; c < o.classes.size(); ++c) {
        acc += o.classes[c].share;
        if (u < acc) {
          it.cls = static_cast<int>(c);
          break;
        }
      }
      in = &o.classes[static_cast<size_t>(it.cls)].input;
      out = &o.classes[static_cast<size_t>(it.cls)].output;
    }
    it.input_len = clamp_len(in->sample(rng), min_input, o.max_input);
    it.output_len = clamp_len(out->sample(rng), 1, o.max_output);
    w.items.push_back(std::move(it));
  }
  std::ostringstream d;
  if (o.rate > 0) {
    d << "synthetic, " << w.items.size() << " requests, Poisson " << fmt_num(o.rate) << " req/s";
  } else if (o.closed_loop_clients > 0) {
    d << "synthetic closed loop of " << o.closed_loop_clients << " clients, ";
    if (o.duration_s > 0) d << "for " << fmt_num(o.duration_s) << " s";
    else d << w.items.size() << " requests";
  } else {
    d << "synthetic, " << w.items.size() << " requests, all at t=0";
  }
  if (o.classes.empty()) {
    d << ", input " << o.input.describe() << ", output " << o.output.describe();
  } else {
    for (const auto& c : o.classes)
      d << "; " << c.name << " " << fmt_num(100.0 * c.share) << "%: input " << c.input.describe() << ", output "
        << c.output.describe();
  }
  if (o.max_input) d << ", input <= " << o.max_input;
  if (o.max_output) d << ", output <= " << o.max_output;
  w.description = d.str();
  return w;
}

PrefixStats ideal_prefix_hits(const Workload& w) {
  PrefixStats st;
  // A trie over block ids: node -> (block id -> child). Each node remembers the longest run
  // of its block's tokens seen so far (a prompt may end inside a block).
  struct Node {
    std::map<int64_t, size_t> children;
    int64_t seen_tokens = 0;
  };
  std::vector<Node> nodes(1);
  const int64_t B = w.block_tokens;
  for (const WorkItem& it : w.items) {
    st.prompt_tokens += it.input_len;
    if (B <= 0) continue;
    size_t cur = 0;
    bool matching = true;
    for (size_t j = 0; j < it.hash_ids.size(); ++j) {
      const int64_t begin = static_cast<int64_t>(j) * B;
      if (begin >= it.input_len) break;
      const int64_t len = std::min(B, it.input_len - begin);
      const auto [child, inserted] = nodes[cur].children.try_emplace(it.hash_ids[j], nodes.size());
      const size_t c = child->second;
      if (inserted) nodes.emplace_back();
      if (matching) {
        const int64_t hit = std::min(len, nodes[c].seen_tokens);
        st.hit_tokens += hit;
        if (hit < len) matching = false;
      }
      nodes[c].seen_tokens = std::max(nodes[c].seen_tokens, len);
      cur = c;
    }
  }
  return st;
}

}  // namespace pdserve::loadgen
