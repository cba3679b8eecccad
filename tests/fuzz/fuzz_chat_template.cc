// libFuzzer target: the chat-template renderer (src/tokenizer/chat_template*, chat_render)
// and the template detection on arbitrary Jinja text.
// Input: byte 0 selects the mode. Bit 0 set: the rest is a Jinja source for
// detect_chat_template. Else: byte 0 >> 1 picks the template kind, byte 1 bit 0 the
// generation prompt, and the rest is role\0content\0role\0content... messages.
// Invariants: content_spans are sorted, disjoint, inside the prompt, and each covers text
// of a message's content (templates may trim it); the prompt goes through encode_chat
// with stories260K's vocabulary (ids in range).
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

using namespace pdserve;

static fuzz::LoadedVocab* vocab;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocab = new fuzz::LoadedVocab(fuzz::load_vocab("models/stories260K.gguf"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) {
    bool recognized = false;
    const tokenizer::ChatTemplateKind k = tokenizer::detect_chat_template(rest, &recognized);
    PDS_FUZZ_CHECK(tokenizer::chat_template_name(k) != nullptr, "template name");
    return 0;
  }
  const auto kind = static_cast<tokenizer::ChatTemplateKind>((data[0] >> 1) % 14);
  const bool gen = data[1] & 1;
  std::vector<tokenizer::ChatMessage> msgs;
  std::vector<std::string> parts;
  size_t start = 1;  // rest[0] is byte 1
  for (size_t i = start; i <= rest.size(); ++i)
    if (i == rest.size() || rest[i] == '\0') {
      parts.push_back(rest.substr(start, i - start));
      start = i + 1;
    }
  for (size_t i = 0; i + 1 < parts.size() && msgs.size() < 16; i += 2) msgs.push_back({parts[i], parts[i + 1]});
  std::vector<tokenizer::TextSpan> spans;
  const std::string prompt = tokenizer::render_chat(kind, msgs, gen, "<s>", "</s>", &spans);
  size_t end = 0;
  for (const tokenizer::TextSpan& s : spans) {
    PDS_FUZZ_CHECK(s.offset >= end, "spans sorted and disjoint");
    PDS_FUZZ_CHECK(s.offset + s.length <= prompt.size(), "span inside the prompt");
    end = s.offset + s.length;
    const std::string_view text = std::string_view(prompt).substr(s.offset, s.length);
    bool found = false;
    for (const auto& m : msgs) found = found || m.content.find(text) != std::string::npos;
    PDS_FUZZ_CHECK(found, "span text is message content");
  }
  const auto ids = vocab->tok->encode_chat(prompt, true, spans);
  for (int32_t id : ids) PDS_FUZZ_CHECK(id >= 0 && id < vocab->tok->vocab().size(), "token id in range");
  return 0;
}
