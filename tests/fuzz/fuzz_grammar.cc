// libFuzzer target: the grammar compiler (src/grammar) — GBNF, regular expressions and
// JSON Schema — and the matcher on the compiled grammar.
// Input: byte 0 picks the front end (0: GBNF, 1: regex, 2: JSON Schema text), the rest
// is its source; bytes after a "\n%%\n" separator are output fed to the matcher.
// Invariants: a regex or schema the compiler accepts gives GBNF that parses and
// validates; the matcher never leaves the dead state once in it, and its token masks
// agree with advancing token by token.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/matcher.h"
#include "grammar/regex_to_gbnf.h"

using namespace pdserve;

// Grammars above the server's default --max-grammar-states are refused, as by the server.
static constexpr uint64_t kMaxSize = 50000;

static std::shared_ptr<const grammar::TokenVocab>* vocab;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A small byte-level vocabulary: every single byte, some pairs and words, EOS = 0.
  std::vector<std::string> pieces = {""};
  for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* w : {"{\"", "\":", "\"}", ", ", "true", "false", "null", "ab", "12", "\\u00"}) pieces.push_back(w);
  vocab = new std::shared_ptr<const grammar::TokenVocab>(
      std::make_shared<grammar::TokenVocab>(pieces, std::vector<int32_t>{0}, static_cast<int>(pieces.size()) + 3));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view src(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string_view output;
  if (size_t sep = src.find("\n%%\n"); sep != std::string_view::npos) {
    output = src.substr(sep + 4);
    src = src.substr(0, sep);
  }
  std::string gbnf;
  bool generated = true;
  switch (data[0] % 3) {
    case 0:
      gbnf = std::string(src);
      generated = false;
      break;
    case 1: {
      auto r = grammar::regex_to_gbnf(src, kMaxSize);
      if (!r.ok()) return 0;
      gbnf = std::move(r.value());
      break;
    }
    default: {
      // As the server: JSON text (structured_output.cc), nesting bounded like a request body.
      nlohmann::json schema = nlohmann::json::parse(src.begin(), src.end(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded() || (!schema.is_object() && !schema.is_boolean())) return 0;
      auto r = grammar::json_schema_to_gbnf(schema, kMaxSize);
      if (!r.ok()) return 0;
      gbnf = std::move(r.value());
      break;
    }
  }
  auto g = grammar::parse_gbnf(gbnf, kMaxSize);
  if (g.code() == StatusCode::ResourceExhausted) return 0;  // over the server's default cap, as a request
  if (generated && !g.ok()) std::fprintf(stderr, "GBNF:\n%s\nerror: %s\n", gbnf.c_str(), g.error().c_str());
  PDS_FUZZ_CHECK(g.ok() || !generated, "generated GBNF parses");
  if (!g.ok()) return 0;
  const Status valid = g.value().validate();
  if (generated && !valid.ok()) std::fprintf(stderr, "GBNF:\n%s\nerror: %s\n", gbnf.c_str(), valid.message().c_str());
  PDS_FUZZ_CHECK(valid.ok() || !generated, "generated GBNF validates");
  if (!valid.ok()) return 0;
  grammar::GrammarMatcher m(std::move(g.value()), *vocab);
  int32_t st = m.initial_state();
  const auto& pieces = (*vocab)->pieces;
  for (size_t i = 0; i < output.size() && i < 256; ++i) {
    const uint8_t b = static_cast<uint8_t>(output[i]);
    if (i % 8 == 0 && st != grammar::GrammarMatcher::kDead) {
      // The mask bit of the one-byte token b is whether advancing by b lives.
      const uint32_t* mask = m.mask(st);
      const bool allowed = b != 0 && ((mask[b / 32] >> (b % 32)) & 1);
      PDS_FUZZ_CHECK(allowed == (b != 0 && m.advance_token(st, b) != grammar::GrammarMatcher::kDead), "mask == advance");
      (void)m.accepting(st);
    }
    const int32_t next = m.advance_byte(st, b);
    if (st == grammar::GrammarMatcher::kDead) PDS_FUZZ_CHECK(next == grammar::GrammarMatcher::kDead, "dead stays dead");
    st = next;
  }
  (void)pieces;
  (void)m.num_states();
  return 0;
}
