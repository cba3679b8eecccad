// The tool-call syntaxes a chat model may be asked to write, and which one a chat template
// defines. The detector follows llama.cpp's common/chat.cpp (common_chat_templates_apply_jinja),
// which picks a format by marker strings in the template source, in this order:
//   "<tool_call>"                                   → kHermes   (Hermes 2/3 Pro, Qwen2.5/3, SmolLM3)
//   "<|start_header_id|>ipython<|end_header_id|>"   → kLlama3   (Llama 3.1 / 3.2 / 3.3)
//   "[TOOL_CALLS]"                                  → kMistral  (Mistral v0.3, Nemo)
//   anything else                                   → kWrapper  (our documented JSON wrapper)
// The forms written by the model (NAME a declared function, ARGS its parameters JSON):
//   kHermes, kWrapper: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//                      (calls separated by "\n" when parallel_tool_calls)
//   kLlama3:           {"name": "NAME", "parameters": ARGS}   (one call: the template
//                      refuses several in a turn)
//   kMistral:          [TOOL_CALLS] [{"name": "NAME", "arguments": ARGS}, ...]
//                      (no "id": the server assigns call ids)
// kWrapper differs from kHermes only in who describes it: the server's system prompt
// (tools_system_prompt), because the template does not define a call syntax.
#pragma once

#include <string>
#include <string_view>

namespace pdserve::server {

enum class ToolSyntax { kWrapper, kHermes, kLlama3, kMistral };

/// The syntax chat template `source` defines for tool calls (kWrapper: none known).
ToolSyntax detect_tool_syntax(std::string_view source);

/// "json-wrapper", "hermes", "llama3-json", "mistral" (start-up log, docs).
const char* tool_syntax_name(ToolSyntax s);

/// The pieces of a syntax. What the grammar lets the model write: prefix call
/// (separator call)* suffix, a call = call_open NAME name_close ARGS call_close.
/// What the parser reads (tolerating any JSON white space): [open_tag] `[` when `array`,
/// then per call [open_tag when not array] a JSON object {"name": ..., args_key: ...}
/// [close_tag], array items separated by ','. `trigger`: the first byte of every
/// tool-call output; an output not starting with it is plain content.
struct ToolSyntaxForm {
  std::string prefix, call_open, name_close, call_close, separator, suffix;
  bool parallel = true;  // whether several calls may be written
  std::string open_tag, close_tag, args_key;
  bool array = false;
  char trigger() const { return prefix.empty() ? call_open[0] : prefix[0]; }
};
const ToolSyntaxForm& tool_syntax_form(ToolSyntax s);

}  // namespace pdserve::server
