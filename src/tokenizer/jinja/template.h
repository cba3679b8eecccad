// A Jinja template as HuggingFace chat templates use it: parsed once, rendered with
// variables. The environment is transformers' (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, the `tojson` filter and the `raise_exception` and
// `strftime_now` globals); undefined variables print as "" (jinja2's default Undefined).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

struct RenderOptions {
  /// The "now" that strftime_now formats (seconds since the epoch, UTC).
  std::time_t now = std::time(nullptr);
};

class Template {
 public:
  /// Lexes and parses `source`; throws TemplateError ("line L, column C: ...").
  explicit Template(const std::string& source);

  /// Renders with `vars` (e.g. messages, tools, bos_token, add_generation_prompt) on top
  /// of the globals range, namespace, dict, raise_exception, strftime_now.
  /// Throws TemplateError (with line/column) on a runtime error or raise_exception.
  std::string render(const ValueDict& vars, const RenderOptions& opts = {}) const;

  /// Names the template reads anywhere (e.g. to tell whether it uses `tools`).
  bool mentions(const std::string& name) const;

 private:
  std::string source_;
  Body body_;
};

}  // namespace pdserve::tokenizer::jinja
