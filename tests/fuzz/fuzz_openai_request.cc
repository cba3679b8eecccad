// libFuzzer target: the OpenAI request parser and validation (src/server/openai_protocol*,
// request_limits, structured_output, tool_calls) on arbitrary bodies, as the HTTP handler
// runs them (generation_handler.cc: depth check, then parse and validate); with tools, the
// generated-output parser on the request's own message text.
// Input: byte 0 picks the endpoint (bit 0: chat), the rest is the body.
// Invariants: no exception escapes; an error is a 4xx with a message and renders as JSON; a
// structured-output grammar built by the server (JSON Schema, regex, choice, tools) parses
// as GBNF.
#include <string_view>

#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "server/openai_protocol.h"
#include "server/request_limits.h"
#include "server/tool_calls.h"

using namespace pdserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  server::RequestLimits limits;
  if (auto e = server::check_json_depth(body, limits.max_json_depth)) {
    PDS_FUZZ_CHECK(e->status == 400, "depth error status");
    return 0;
  }
  server::ParsedRequest p = chat ? server::parse_chat_request(body) : server::parse_completion_request(body);
  if (!p.ok()) {
    PDS_FUZZ_CHECK(p.error->status >= 400 && p.error->status < 500, "4xx error");
    PDS_FUZZ_CHECK(!p.error->message.empty(), "error message");
    (void)p.error->body();
    return 0;
  }
  const server::GenerationRequest& r = p.request;
  PDS_FUZZ_CHECK(r.n >= 1 && r.n <= server::kMaxN, "n in range");
  PDS_FUZZ_CHECK(r.num_choices() >= 1 && r.num_choices() <= server::kMaxChoices, "choices in range");
  PDS_FUZZ_CHECK(r.params.stop.size() <= static_cast<size_t>(server::kMaxStop), "stop count");
  PDS_FUZZ_CHECK(r.params.top_logprobs <= server::kMaxLogprobs, "logprobs");
  if (auto e = server::check_request_limits(r, limits)) (void)e->body();
  (void)server::check_model(r, "stories260K");
  if (!r.params.grammar.empty()) {
    auto g = grammar::parse_gbnf(r.params.grammar);
    // A user's own GBNF may be wrong (the engine answers 400); one the server wrote may not.
    const bool user_gbnf = body.find("grammar") != std::string_view::npos;
    PDS_FUZZ_CHECK(g.ok() || user_gbnf, "server-built grammar parses");
    if (g.ok()) (void)g.value().validate();
  }
  if (r.tools.active()) {
    (void)server::tools_system_prompt(r.tools);
    for (const auto& m : r.messages) {
      server::ParsedToolOutput out = server::parse_tool_output(m.content, "call_x");
      (void)server::dump_json(out.calls);
    }
  }
  return 0;
}
