// Chat template detection, after llama.cpp llm_chat_detect_template (src/llama-chat.cpp):
// ordered substring tests on the Jinja source. Families pdserve does not render (Phi-4,
// SmolVLM, ChatGLM, Falcon 3, GLM-Edge, Gemma, ...) are reported as unrecognized.
#include "tokenizer/chat_template.h"

#include <utility>

namespace pdserve::tokenizer {

namespace {

constexpr std::pair<ChatTemplateKind, const char*> kNames[] = {
    {ChatTemplateKind::Plain, "plain"},
    {ChatTemplateKind::Llama2, "llama2-sys"},
    {ChatTemplateKind::Llama3, "llama3"},
    {ChatTemplateKind::ChatML, "chatml"},
    {ChatTemplateKind::Mistral, "mistral-v3"},
    {ChatTemplateKind::Phi3, "phi3"},
    {ChatTemplateKind::Zephyr, "zephyr"},
    {ChatTemplateKind::Llama2NoSys, "llama2"},
    {ChatTemplateKind::Llama2SysBos, "llama2-sys-bos"},
    {ChatTemplateKind::Llama2SysStrip, "llama2-sys-strip"},
    {ChatTemplateKind::MistralV1, "mistral-v1"},
    {ChatTemplateKind::MistralV3Tekken, "mistral-v3-tekken"},
    {ChatTemplateKind::MistralV7, "mistral-v7"},
    {ChatTemplateKind::MistralV7Tekken, "mistral-v7-tekken"},
};

/// The family, or nullopt-like `ok = false` for templates we cannot render.
ChatTemplateKind detect(const std::string& t, bool& ok) {
  ok = true;
  for (auto [kind, name] : kNames) {
    if (t == name) return kind;
  }
  auto has = [&t](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_start|>")) {
    // <|im_sep|>: Phi-4; <end_of_utterance>: SmolVLM (not ChatML despite <|im_start|>).
    if (has("<|im_sep|>") || has("<end_of_utterance>")) ok = false;
    return ChatTemplateKind::ChatML;
  }
  if (t.rfind("mistral", 0) == 0 || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return ChatTemplateKind::MistralV7;
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return ChatTemplateKind::MistralV1;
      if (has("\"[INST]\"")) return ChatTemplateKind::MistralV3Tekken;
      return ChatTemplateKind::Mistral;
    }
    if (has("content.strip()")) return ChatTemplateKind::Llama2SysStrip;
    if (has("bos_token + '[INST]")) return ChatTemplateKind::Llama2SysBos;
    if (has("<<SYS>>")) return ChatTemplateKind::Llama2;
    return ChatTemplateKind::Llama2NoSys;
  }
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplateKind::Phi3;
  if (has("[gMASK]<sop>")) {  // ChatGLM 4
    ok = false;
    return ChatTemplateKind::Plain;
  }
  if (has("<|assistant|>") && has("<|user|>")) {
    // llama.cpp: "</s>" → Falcon 3, otherwise GLM-Edge. pdserve: Zephyr when turns end
    // with eos_token (see chat_template.h).
    if (!has("</s>") && has("eos_token")) return ChatTemplateKind::Zephyr;
    ok = false;
    return ChatTemplateKind::Plain;
  }
  // Families llama.cpp tests before Llama 3 that pdserve does not render.
  // GLM-Edge (vision)
  const bool unsupported_before_zephyr = has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>");
  if (!unsupported_before_zephyr && has("<|user|>") && has("<|endoftext|>")) return ChatTemplateKind::Zephyr;
  const bool unsupported = unsupported_before_zephyr ||
                           has("bos_token + message['role']") ||                  // Monarch
                           has("<start_of_turn>") ||                              // Gemma
                           has("'\\n\\nAssistant: ' + eos_token") ||          // Orion
                           has("GPT4 Correct ") ||                                // OpenChat
                           (has("USER: ") && has("ASSISTANT: ")) ||               // Vicuna
                           (has("### Instruction:") && has("<|EOT|>")) ||         // DeepSeek Coder
                           (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>"));  // Command-R
  if (!unsupported && has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplateKind::Llama3;
  ok = false;
  return ChatTemplateKind::Plain;
}

}  // namespace

ChatTemplateKind detect_chat_template(const std::string& jinja, bool* recognized) {
  if (jinja.empty()) {
    if (recognized) *recognized = true;
    return ChatTemplateKind::Plain;
  }
  bool ok = true;
  ChatTemplateKind kind = detect(jinja, ok);
  if (!ok) kind = ChatTemplateKind::Plain;
  if (recognized) *recognized = ok;
  return kind;
}

const char* chat_template_name(ChatTemplateKind kind) {
  for (auto [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "plain";
}

}  // namespace pdserve::tokenizer
