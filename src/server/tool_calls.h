// Chat tool calling (`tools`, `tool_choice`, `parallel_tool_calls`) on any chat model,
// with one documented wire format (the Hermes / Qwen2.5 form):
//   * the tools are described to the model in the system message (tools_system_prompt),
//   * a call is written as <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//     (several separated by "\n" when parallel_tool_calls), and decoding is constrained to
//     that syntax with each tool's `parameters` schema (tool_choice required or named),
//     or to "text not starting with '<', or tool calls" (auto); none: unconstrained,
//   * the output is parsed back into message.tool_calls with finish_reason "tool_calls";
//   * in the conversation, assistant tool_calls and role "tool" results are rendered in
//     the same form (<tool_response>...</tool_response> as a user turn).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/json_util.h"

namespace pdserve::server {

struct ToolConfig {
  json tools = json::array();  // the request's function definitions (validated)
  std::string choice = "auto"; // none | auto | required | named
  std::string named;           // the function when choice == named
  bool parallel = true;
  /// Tools in play: the prompt describes them and the output is parsed for calls.
  bool active() const { return !tools.empty() && choice != "none"; }
};

/// Reads tools / tool_choice / parallel_tool_calls of a chat body. 400 errors name the
/// field, e.g. tools[0].function.name or tools[1].function.parameters.
std::optional<ApiError> parse_tools(const json& obj, ToolConfig& out);

/// The GBNF grammar of the output allowed by `t` (t.active()).
std::string tools_grammar(const ToolConfig& t);

/// The system-prompt text describing the tools and the call syntax.
std::string tools_system_prompt(const ToolConfig& t);

/// A conversation message in the wire format: an assistant message's `tool_calls`
/// appended to `content` as <tool_call> blocks; a role "tool" message's content wrapped
/// in <tool_response> (its role becomes "user"). Errors name `param` (the message).
std::optional<ApiError> render_tool_message(const json& m, const std::string& param, std::string& role,
                                            std::string& content);

/// Generated text split into content (text before the first call; nullopt when empty)
/// and the OpenAI tool_calls array ([] when the text holds no complete call). Call ids
/// are `id_prefix` + "_" + the call's index.
struct ParsedToolOutput {
  std::optional<std::string> content;
  json calls = json::array();
};
ParsedToolOutput parse_tool_output(const std::string& text, const std::string& id_prefix);

/// The id prefix of choice `index`'s calls in response `response_id`.
std::string tool_call_id_prefix(const std::string& response_id, int index);

/// Rewrites a chat.completion body's choices whose text holds tool calls: message
/// content (text before the calls, or null), message.tool_calls, and finish_reason
/// "tool_calls" where it was "stop".
void apply_tool_calls(json& chat_completion);

/// Streaming with tools: holds a choice's text back while it may be a tool call (the
/// output starts with '<'), passing plain text through as it comes.
class ToolCallStreamFilter {
 public:
  /// The text to stream now as content for `delta_text`.
  std::string push(const std::string& delta_text);
  /// At the end: the held-back text parsed (content = text that was not a call).
  ParsedToolOutput finish(const std::string& id_prefix);

 private:
  int mode_ = 0;  // 0: nothing seen yet, 1: plain text, 2: tool calls (held back)
  std::string held_;
};

}  // namespace pdserve::server
