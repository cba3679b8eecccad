#include "server/tool_syntax.h"

namespace pdserve::server {

ToolSyntax detect_tool_syntax(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolSyntax::kHermes;
  if (has("<|start_header_id|>ipython<|end_header_id|>")) return ToolSyntax::kLlama3;
  if (has("[TOOL_CALLS]")) return ToolSyntax::kMistral;
  return ToolSyntax::kWrapper;
}

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kHermes: return "hermes";
    case ToolSyntax::kLlama3: return "llama3-json";
    case ToolSyntax::kMistral: return "mistral";
    case ToolSyntax::kWrapper: break;
  }
  return "json-wrapper";
}

const ToolSyntaxForm& tool_syntax_form(ToolSyntax s) {
  static const ToolSyntaxForm hermes{"", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n", "", true,
                                     "<tool_call>", "</tool_call>", "arguments", false};
  static const ToolSyntaxForm llama3{"", "{\"name\": \"", "\", \"parameters\": ", "}", "", "", false,
                                     "", "", "parameters", false};
  static const ToolSyntaxForm mistral{"[TOOL_CALLS] [", "{\"name\": \"", "\", \"arguments\": ", "}", ", ", "]", true,
                                      "[TOOL_CALLS]", "", "arguments", true};
  switch (s) {
    case ToolSyntax::kLlama3: return llama3;
    case ToolSyntax::kMistral: return mistral;
    default: return hermes;
  }
}

}  // namespace pdserve::server
