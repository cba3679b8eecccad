// Chat tool calling (`tools`, `tool_choice`, `parallel_tool_calls`) on any chat model.
// The call syntax (tool_syntax.h) is the model's native one when its Jinja chat template
// renders the tools and defines one (Hermes/Qwen <tool_call>, Llama 3.x JSON, Mistral
// [TOOL_CALLS]); otherwise the documented JSON wrapper (the Hermes form), described to the
// model by the server:
//   * without a template that renders tools, the tools and the syntax are described in the
//     system message (tools_system_prompt) and the conversation's assistant tool_calls and
//     role "tool" results are rendered in that form (<tool_response>...</tool_response> as
//     a user turn); with one that renders tools but defines no syntax, the template renders
//     the tools and the syntax paragraph (tool_syntax_instructions) joins the system message,
//   * decoding is constrained to the syntax with each tool's `parameters` schema
//     (tool_choice required or named), or to "plain text not starting with the syntax's
//     first byte, or tool calls" (auto); none: unconstrained,
//   * the output is parsed back into message.tool_calls with finish_reason "tool_calls".
//     Cut by max_tokens (finish_reason "length"): the calls written so far, the last one
//     with its arguments as generated (an incomplete JSON text, as OpenAI's API and vLLM's
//     streamed deltas give); a call whose name is incomplete is left out, and none of the
//     call syntax is returned as content (content: null).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/json_util.h"
#include "server/structured_output.h"
#include "server/tool_syntax.h"

namespace pdserve::server {

struct ToolConfig {
  json tools = json::array();  // the request's function definitions (validated)
  std::string choice = "auto"; // none | auto | required | named
  std::string named;           // the function when choice == named
  bool parallel = true;
  ToolSyntax syntax = ToolSyntax::kWrapper;  // set once the prompt is rendered
  /// Tools in play: the prompt describes them and the output is parsed for calls.
  bool active() const { return !tools.empty() && choice != "none"; }
};

/// Reads tools / tool_choice / parallel_tool_calls of a chat body. 400 errors name the
/// field, e.g. tools[0].function.name or tools[1].function.parameters.
std::optional<ApiError> parse_tools(const json& obj, ToolConfig& out, uint64_t max_grammar_states = kDefaultMaxGrammarStates);

/// The GBNF grammar of the output allowed by `t` (t.active()) in t.syntax.
std::string tools_grammar(const ToolConfig& t);

/// The system-prompt text describing the tools and the call syntax (the JSON wrapper).
std::string tools_system_prompt(const ToolConfig& t);
/// Its last paragraph alone: how to write a call (for templates that render the tools
/// but define no call syntax).
std::string tool_syntax_instructions();

/// A conversation message in the wire format: an assistant message's `tool_calls`
/// appended to `content` as <tool_call> blocks; a role "tool" message's content wrapped
/// in <tool_response> (its role becomes "user"). Errors name `param` (the message).
std::optional<ApiError> render_tool_message(const json& m, const std::string& param, std::string& role,
                                            std::string& content);

/// Generated text split into content and the OpenAI tool_calls array. Text not starting
/// with the syntax's trigger byte is content (no calls); otherwise it is calls (content
/// nullopt), read as the header describes, a cut last call included. Call ids are
/// `id_prefix` + "_" + the call's index; for kMistral, 9 letters and digits derived from
/// that (Mistral Nemo's template refuses any other id when the call comes back in the
/// next request, as llama.cpp's common/chat.cpp notes).
/// A tool-call id as Mistral's templates take it: `id` when it is 9 letters and digits, else
/// 9 derived from it (SHA-256), the same for the same id, so a call and the tool message
/// that answers it still match. Mistral Nemo's template raises on any other id (vLLM maps
/// ids the same way).
std::string mistral_call_id(const std::string& id);

struct ParsedToolOutput {
  std::optional<std::string> content;
  json calls = json::array();
  bool cut = false;  // the text ends inside a call (max_tokens, a stop string): not "tool_calls"
};
ParsedToolOutput parse_tool_output(const std::string& text, const std::string& id_prefix,
                                   ToolSyntax syntax = ToolSyntax::kWrapper);

/// The id prefix of choice `index`'s calls in response `response_id`.
std::string tool_call_id_prefix(const std::string& response_id, int index);

/// Rewrites a chat.completion body's choices whose text is tool calls in `syntax`: message
/// content null, message.tool_calls (when any), and finish_reason "tool_calls" where it
/// was "stop".
void apply_tool_calls(json& chat_completion, ToolSyntax syntax = ToolSyntax::kWrapper);

/// Streaming with tools: holds a choice's text back when it is tool calls (the output
/// starts with the syntax's trigger byte), passing plain text through as it comes.
class ToolCallStreamFilter {
 public:
  explicit ToolCallStreamFilter(ToolSyntax syntax = ToolSyntax::kWrapper) : syntax_(syntax) {}
  /// The text to stream now as content for `delta_text`.
  std::string push(const std::string& delta_text);
  /// At the end: the held-back text parsed (content = text that was not a call).
  ParsedToolOutput finish(const std::string& id_prefix);
  /// Whether text now passes through as it comes (the output began as plain text).
  bool passing() const { return mode_ == 1; }

 private:
  ToolSyntax syntax_;
  int mode_ = 0;  // 0: nothing seen yet, 1: plain text, 2: tool calls (held back)
  std::string held_;
};

}  // namespace pdserve::server
