// Chat prompts from the model's own Jinja chat template (GGUF `tokenizer.chat_template`),
// rendered with tokenizer/jinja the way llama.cpp's server does (common/chat.cpp with its
// template capability probing): the variables messages, tools, add_generation_prompt,
// bos_token, eos_token, date_string; and its adaptations — a system message merged into
// the first user turn when the template has no system role, tool-call arguments passed as
// objects where the template renders them, and a leading BOS string removed when the
// tokenizer adds BOS itself.
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"  // TextSpan

namespace pdserve::tokenizer {

namespace jinja {
class Template;
}

/// What a template does with probe conversations (llama.cpp's chat_template_caps).
struct ChatTemplateCaps {
  bool supports_system_role = false;       // a system message's text appears in the output
  bool supports_tools = false;             // a tool's name appears when `tools` is given
  bool supports_tool_calls = false;        // an assistant tool call's arguments appear
  bool supports_object_arguments = false;  // ... when passed as an object (not a JSON string)
};

class JinjaChatTemplate {
 public:
  /// Parses `source` and probes its capabilities; throws jinja::TemplateError on a
  /// syntax error. `bos`/`eos`: the vocab's BOS/EOS texts bound to bos_token/eos_token.
  JinjaChatTemplate(const std::string& source, std::string bos, std::string eos);
  ~JinjaChatTemplate();

  const ChatTemplateCaps& caps() const { return caps_; }
  /// The template text as given.
  const std::string& source() const { return source_; }

  /// Renders OpenAI-style `messages` (array of {role, content, tool_calls?, ...}) with
  /// `tools` (array, or null for none). `now` is the date strftime_now and date_string
  /// see (UTC). When `strip_bos` (the tokenizer adds BOS), a leading bos string is
  /// removed and *bos_stripped (optional) set. Throws jinja::TemplateError (e.g. the
  /// template's raise_exception) with line/column.
  /// `kwargs` (an object, or null): more variables the template sees, e.g. Qwen3's
  /// `enable_thinking` (vLLM's and llama.cpp's chat_template_kwargs; see
  /// template_kwargs_error).
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt, std::time_t now, bool strip_bos = false,
                    bool* bos_stripped = nullptr, const nlohmann::ordered_json& kwargs = nullptr) const;

  /// As apply(), and `content_spans` receives the byte ranges of the result that are
  /// message content (for Tokenizer::encode_chat, which parses special tokens only
  /// outside them). Found by rendering once more with a private-use marker in place of
  /// each message's string content (content_spans_of); throws jinja::TemplateError when
  /// the two renderings cannot be matched up.
  std::string apply_with_spans(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool add_generation_prompt, std::time_t now, bool strip_bos,
                               std::vector<TextSpan>* content_spans, const nlohmann::ordered_json& kwargs = nullptr) const;

 private:
  std::string render_raw(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                         bool add_generation_prompt, std::time_t now, const nlohmann::ordered_json& kwargs = nullptr) const;
  std::string try_render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const;

  std::unique_ptr<jinja::Template> tmpl_;
  std::string bos_, eos_;
  std::string source_;
  ChatTemplateCaps caps_;
};

/// The byte ranges of `real` (a rendering) that hold message content, given the same template's
/// rendering with markers for the contents: its text `seg` around them (seg.size() ==
/// idx.size() + 1) and which content each marker stood for (`idx` into `contents`). Each
/// rendered content is the message's content, or else the longest of what a template's usual
/// edits leave of it (`| trim`, `.strip()`, `.lstrip()`, `.rstrip()`,
/// `.split('</think>')[-1]`, nothing) that the template's next text follows. Throws
/// jinja::TemplateError when `real` cannot be read that way (e.g. the template's own text
/// depends on the content).
std::vector<TextSpan> content_spans_of(const std::string& real, const std::vector<std::string>& seg,
                                       const std::vector<size_t>& idx, const std::vector<std::string>& contents);

/// Why `kwargs` cannot be a chat template's extra variables ("" when it can): it must be a
/// JSON object, and may not set what the request itself gives the template (`messages`,
/// `tools`, `add_generation_prompt`) or the model's `bos_token` / `eos_token`. Other names
/// (e.g. `enable_thinking`, `date_string`) are set as given.
std::string template_kwargs_error(const nlohmann::ordered_json& kwargs);

/// Seconds since the epoch of YYYY-MM-DD at 00:00 UTC; false on a malformed date.
bool parse_utc_date(const std::string& ymd, std::time_t* out);

}  // namespace pdserve::tokenizer
