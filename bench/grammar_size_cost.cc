// What a grammar's expanded size (Grammar::expanded_size, --max-grammar-states) costs
// the matcher (issue #17): for each grammar, the count, the time to parse and count it,
// and — exploring every state reachable over single bytes (an upper bound on what any
// number of requests can make the shared matcher memoise, masks aside) — the states,
// frames, resident memory and time. Up to `max_states` states (and 20 s) per grammar;
// "+" marks a grammar whose states were not all explored.
//   build/bench/grammar_size_cost [max_states]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/matcher.h"
#include "grammar/regex_to_gbnf.h"

using namespace pdserve::grammar;

namespace {

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void measure(const std::string& what, const std::string& gbnf, size_t max_states) {
  auto t0 = std::chrono::steady_clock::now();
  auto g = parse_gbnf(gbnf);
  if (!g.ok()) {
    std::printf("%-44s parse error: %s\n", what.c_str(), g.error().c_str());
    return;
  }
  const uint64_t size = g->expanded_size();
  const double parse_ms = ms_since(t0);
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  const long rss0 = rss_kib();
  t0 = std::chrono::steady_clock::now();
  size_t explored = 0;
  bool all = true;
  int frames = 0;
  {
    GrammarMatcher m(std::move(*g), std::make_shared<TokenVocab>(pieces, std::vector<int32_t>{}, 256));
    std::vector<char> seen(1, 1);
    std::deque<int32_t> todo{m.initial_state()};
    while (!todo.empty()) {
      if (explored >= max_states || (explored % 64 == 0 && ms_since(t0) > 20000)) {  // 20 s per grammar
        all = false;
        break;
      }
      const int32_t s = todo.front();
      todo.pop_front();
      ++explored;
      for (int b = 0; b < 256; ++b) {
        const int32_t t = m.advance_byte(s, static_cast<uint8_t>(b));
        if (t < 0) continue;
        if (static_cast<size_t>(t) >= seen.size()) seen.resize(t + 1, 0);
        if (!seen[t]) {
          seen[t] = 1;
          todo.push_back(t);
        }
      }
    }
    frames = m.num_frames();
    const long rss1 = rss_kib();
    std::printf("%-44s size %12llu  parse+count %8.2f ms  states %8d%s  frames %9d  RSS +%7.1f MiB  explore %9.1f ms\n",
                what.c_str(), static_cast<unsigned long long>(size), parse_ms, m.num_states(), all ? " " : "+", frames,
                (rss1 - rss0) / 1024.0, ms_since(t0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t max_states = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
  auto rx = [](const char* re) { return *regex_to_gbnf(re); };
  auto js = [](const char* s) { return *json_schema_to_gbnf(nlohmann::ordered_json::parse(s)); };
  measure("regex ([a-z]{100}){10}", rx("([a-z]{100}){10}"), max_states);
  measure("regex ([a-z]{100}){100}", rx("([a-z]{100}){100}"), max_states);
  measure("regex ([a-z]{100}){300}", rx("([a-z]{100}){300}"), max_states);
  measure("regex (a{1000}){1000}", rx("(a{1000}){1000}"), max_states);
  measure("regex ((x?){100}){100}", rx("((x?){100}){100}"), max_states);
  measure("json_object", json_object_gbnf(), max_states);
  measure("schema string maxLength 100", js(R"({"type":"string","maxLength":100})"), max_states);
  measure("schema string maxLength 1000", js(R"({"type":"string","maxLength":1000})"), max_states);
  measure("schema string maxLength 10000", js(R"({"type":"string","maxLength":10000})"), max_states);
  measure("schema array minItems 100 of integers", js(R"({"type":"array","minItems":100,"items":{"type":"integer"}})"), max_states);
  measure("schema nested minItems 1000 x 1000",
          js(R"({"type":"array","minItems":1000,"items":{"type":"array","minItems":1000,"items":{"type":"integer"}}})"),
          max_states);
  measure("gbnf (item{1000}){1000}", "root ::= (item{1000}){1000}\nitem ::= [a-z] \"-\"\n", max_states);
  return 0;
}
