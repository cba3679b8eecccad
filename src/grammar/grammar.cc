#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace pdserve::grammar {

int32_t Grammar::rule_id(const std::string& name) {
  auto [it, fresh] = rule_index.try_emplace(name, static_cast<int32_t>(rule_names.size()));
  if (fresh) {
    rule_names.push_back(name);
    rule_alts.emplace_back();
  }
  return it->second;
}

int32_t Grammar::new_rule(const std::string& base) {
  for (int k = static_cast<int>(rule_names.size());; ++k) {
    std::string name = base + "-" + std::to_string(k);
    if (!rule_index.count(name)) return rule_id(name);
  }
}

void Grammar::add_alt(int32_t rule, const std::vector<Element>& seq) {
  rule_alts[rule].push_back(static_cast<int32_t>(elems.size()));
  elems.insert(elems.end(), seq.begin(), seq.end());
  elems.push_back({Element::kEnd, 0});
}

Element Grammar::bytes(const ByteSet& set) {
  auto [it, fresh] = set_index.try_emplace(set, static_cast<int32_t>(sets.size()));
  if (fresh) sets.push_back(set);
  return {Element::kBytes, it->second};
}

Element Grammar::byte(uint8_t b) {
  ByteSet s;
  s.add(b, b);
  return bytes(s);
}

namespace {

/// The rules of `g` that have an alternative whose every element passes `bytes_ok` (a byte
/// set) or is such a rule itself (least fixpoint).
template <class BytesOk>
std::vector<char> rules_where(const Grammar& g, BytesOk bytes_ok) {
  const size_t n = g.rule_alts.size();
  std::vector<char> in(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (in[r]) continue;
      for (int32_t a : g.rule_alts[r]) {
        bool all = true;
        for (int32_t i = a; g.elems[i].kind != Element::kEnd && all; ++i)
          all = g.elems[i].kind == Element::kBytes ? bytes_ok(g.sets[g.elems[i].value]) : in[g.elems[i].value] != 0;
        if (all) { in[r] = 1; changed = true; break; }
      }
    }
  }
  return in;
}

/// The rules that can end: some alternative's every element matches (a byte set is not empty).
std::vector<char> productive_rules(const Grammar& g) {
  return rules_where(g, [](const ByteSet& b) { return b != ByteSet{}; });
}

}  // namespace

Status Grammar::validate() const {
  const size_t n = rule_alts.size();
  for (size_t r = 0; r < n; ++r)
    if (rule_alts[r].empty()) return Status::InvalidArgument("undefined rule '" + rule_names[r] + "'");
  // Nullable rules (no byte needed), then the "leftmost reference" graph must be acyclic.
  const std::vector<char> nullable = rules_where(*this, [](const ByteSet&) { return false; });
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (int32_t a : rule_alts[r])
      for (int32_t i = a; elems[i].kind == Element::kRule; ++i) {
        left[r].push_back(elems[i].value);
        if (!nullable[elems[i].value]) break;
      }
  std::vector<int> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  std::string bad;
  std::function<bool(int32_t)> dfs = [&](int32_t r) {
    color[r] = 1;
    for (int32_t s : left[r]) {
      if (color[s] == 1) { bad = rule_names[s]; return false; }
      if (color[s] == 0 && !dfs(s)) return false;
    }
    color[r] = 2;
    return true;
  };
  for (size_t r = 0; r < n; ++r)
    if (color[r] == 0 && !dfs(static_cast<int32_t>(r)))
      return Status::InvalidArgument("rule '" + bad + "' is left recursive (not supported)");
  // Productive rules (fixpoint): those that can end, every element of some alternative
  // matching (a byte set matches when it is not empty). A root that cannot end matches no
  // text: refused here, not found by the first token that has nowhere to go.
  const std::vector<char> productive = productive_rules(*this);
  if (root >= 0 && !productive[root])
    return Status::InvalidArgument("the grammar matches no text: rule '" + rule_names[root] +
                                   "' cannot be completed (an empty character class such as [^\\x00-\\U0010FFFF], "
                                   "or rules that never end)");
  return Status::Ok();
}

void Grammar::drop_dead_alternatives() {
  const std::vector<char> productive = productive_rules(*this);
  for (auto& alts : rule_alts)
    alts.erase(std::remove_if(alts.begin(), alts.end(),
                              [&](int32_t a) {
                                for (int32_t i = a; elems[i].kind != Element::kEnd; ++i)
                                  if (elems[i].kind == Element::kBytes ? sets[elems[i].value] == ByteSet{} : !productive[elems[i].value])
                                    return true;
                                return false;
                              }),
               alts.end());
}

uint64_t Grammar::expanded_size(uint64_t limit) const {
  if (root < 0 || root >= static_cast<int32_t>(rule_alts.size())) return 0;
  limit = std::min(limit, kNoSizeLimit - 1);
  constexpr uint64_t kUnknown = kNoSizeLimit;
  // size(r) = the elements of every rule in r's tail-call closure (r and the rules it
  // tail-calls, transitively: they share r's return stack, so each counts once), plus
  // size(s) for each non-tail reference to s. Iterative (a walk per rule being sized),
  // memoised per rule; a reference to a rule whose walk is open is recursion: 0.
  std::vector<uint64_t> memo(rule_alts.size(), kUnknown);
  std::vector<char> open(rule_alts.size(), 0);
  struct Walk {
    int32_t rule;
    std::vector<int32_t> todo;          // closure rules not scanned yet
    std::unordered_set<int32_t> seen;   // closure rules found so far
    int32_t cur = -1;                   // the closure rule being scanned
    size_t alt = 0;                     // its next alternative
    int32_t pos = -1;                   // the element being scanned, -1 between alternatives
    uint64_t sum = 0;
  };
  std::vector<Walk> walks;
  auto start = [&](int32_t r) {
    open[r] = 1;
    Walk w;
    w.rule = r;
    w.todo.push_back(r);
    w.seen.insert(r);
    walks.push_back(std::move(w));
  };
  // Adds b to a (both <= limit); false when the sum passes the limit.
  auto add = [&](uint64_t& a, uint64_t b) {
    if (b > limit - a) return false;
    a += b;
    return true;
  };
  start(root);
  while (!walks.empty()) {
    Walk& w = walks.back();
    if (w.pos < 0) {
      if (w.cur >= 0 && w.alt < rule_alts[w.cur].size()) {
        w.pos = rule_alts[w.cur][w.alt++];
      } else if (!w.todo.empty()) {
        w.cur = w.todo.back();
        w.todo.pop_back();
        w.alt = 0;
        continue;
      } else {  // this walk is done: its size goes to the walk that referred to it
        const uint64_t v = w.sum;
        open[w.rule] = 0;
        memo[w.rule] = v;
        walks.pop_back();
        if (walks.empty()) return v;
        if (!add(walks.back().sum, v)) return limit + 1;
        continue;
      }
    }
    const Element& e = elems[w.pos];
    if (!add(w.sum, 1)) return limit + 1;
    if (e.kind == Element::kEnd) {
      w.pos = -1;
      continue;
    }
    const int32_t at = w.pos++;
    if (e.kind != Element::kRule) continue;
    const int32_t s = e.value;
    if (elems[at + 1].kind == Element::kEnd) {  // a tail call: part of this closure
      if (w.seen.insert(s).second) w.todo.push_back(s);
    } else if (memo[s] != kUnknown) {
      if (!add(w.sum, memo[s])) return limit + 1;
    } else if (!open[s]) {
      start(s);  // invalidates w
    }
  }
  return 0;  // not reached
}

std::string grammar_too_large_message(uint64_t max_size) {
  return "the grammar expands to more than " + std::to_string(max_size) +
         " elements (a repetition copies what it repeats, so nested repetitions multiply)";
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

/// Splits [lo, hi] (no surrogates inside) into ranges whose UTF-8 encodings are
/// products of per-byte ranges, and emits each product.
void utf8_split(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  static const uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t m : kMax) {
    if (lo <= m && m < hi) {
      utf8_split(lo, m, out);
      utf8_split(m + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  ByteRanges seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

}  // namespace

Element codepoint_class(Grammar& g, std::vector<CodepointRange> ranges, bool negated) {
  // Normalise: sort, merge, complement if negated, remove surrogates.
  std::sort(ranges.begin(), ranges.end(), [](auto& x, auto& y) { return x.lo < y.lo; });
  std::vector<CodepointRange> merged;
  for (auto r : ranges) {
    if (r.lo > r.hi) continue;
    r.hi = std::min<uint32_t>(r.hi, 0x10FFFF);
    if (!merged.empty() && r.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, r.hi);
    else merged.push_back(r);
  }
  if (negated) {
    std::vector<CodepointRange> comp;
    uint32_t next = 0;
    for (auto r : merged) {
      if (r.lo > next) comp.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= 0x10FFFF) comp.push_back({next, 0x10FFFF});
    merged = std::move(comp);
  }
  std::vector<CodepointRange> clean;
  for (auto r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) { clean.push_back(r); continue; }
    if (r.lo < 0xD800) clean.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) clean.push_back({0xE000, r.hi});
  }
  std::string key;  // a class with multi-byte characters becomes a rule: built once per grammar
  if (!clean.empty() && clean.back().hi >= 0x80) {
    key.assign(reinterpret_cast<const char*>(clean.data()), clean.size() * sizeof(CodepointRange));
    if (auto it = g.class_index.find(key); it != g.class_index.end()) return it->second;
  }
  ByteSet ascii;
  bool any_ascii = false, multi = false;
  std::vector<ByteRanges> seqs;
  for (auto r : clean) {
    if (r.lo < 0x80) {
      ascii.add(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(std::min<uint32_t>(r.hi, 0x7F)));
      any_ascii = true;
    }
    if (r.hi >= 0x80) {
      multi = true;
      utf8_split(std::max<uint32_t>(r.lo, 0x80), r.hi, seqs);
    }
  }
  if (!multi) return g.bytes(ascii);  // possibly empty: matches nothing
  const int32_t rule = g.new_rule("char");
  g.class_index.emplace(std::move(key), Element{Element::kRule, rule});
  if (any_ascii) g.add_alt(rule, {g.bytes(ascii)});
  // Merge sequences that share all but their last byte range into one alternative.
  for (const ByteRanges& s : seqs) {
    std::vector<Element> seq;
    for (auto [lo, hi] : s) {
      ByteSet b;
      b.add(lo, hi);
      seq.push_back(g.bytes(b));
    }
    g.add_alt(rule, seq);
  }
  return {Element::kRule, rule};
}

}  // namespace pdserve::grammar
