// Chat templates: recognises the common Jinja templates found in GGUF
// `tokenizer.chat_template` and renders them natively (no Jinja engine), byte-exact with
// llama.cpp's llm_chat_apply_template (src/llama-chat.cpp) for each family.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"  // TextSpan

namespace pdserve::tokenizer {

/// One chat message as in the OpenAI API (`role`: system, user, assistant).
struct ChatMessage {
  std::string role;
  std::string content;
};

/// Template families. The first seven are the main kinds; the rest are the variants
/// llama.cpp tells apart (appended so the values of the main kinds stay stable).
/// Names are llama.cpp's (`--chat-template` values).
enum class ChatTemplateKind {
  Plain,            // "plain": no template (format below)
  Llama2,           // "llama2-sys": [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
  Llama3,           // "llama3": <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  ChatML,           // "chatml": <|im_start|>role\n...<|im_end|>\n
  Mistral,          // "mistral-v3": [INST] ...[/INST] answer</s>
  Phi3,             // "phi3": <|role|>\n...<|end|>\n
  Zephyr,           // "zephyr": <|role|>\n...EOS\n
  Llama2NoSys,      // "llama2": like Llama2, system text without <<SYS>>
  Llama2SysBos,     // "llama2-sys-bos": <s> before every later [INST]
  Llama2SysStrip,   // "llama2-sys-strip": message content trimmed
  MistralV1,        // "mistral-v1": " [INST] ... [/INST] answer</s>"
  MistralV3Tekken,  // "mistral-v3-tekken": [INST]...[/INST]answer</s>
  MistralV7,        // "mistral-v7": [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST]
  MistralV7Tekken,  // "mistral-v7-tekken": as v7 without the spaces
};

/// Recognises the template family of a Jinja source with llama.cpp's substring heuristics
/// (llm_chat_detect_template); a template name (e.g. "chatml") is accepted too.
/// `recognized` is set false (and Plain returned) when `jinja` is non-empty but matches
/// no supported family; empty `jinja` gives Plain with `recognized` true.
///
/// One deliberate difference: a template with "<|user|>", "<|assistant|>" and
/// "eos_token" but no "</s>" (the HuggingFace Zephyr templates) is Zephyr; llama.cpp
/// classifies it as GLM-Edge, which drops the EOS and newlines Zephyr's Jinja emits.
ChatTemplateKind detect_chat_template(const std::string& jinja, bool* recognized = nullptr);

/// Name of a template kind ("chatml", "llama3", ..., "plain").
const char* chat_template_name(ChatTemplateKind kind);

/// Renders messages to the prompt text the model expects, ending with the assistant
/// generation prompt when `add_generation_prompt` (the [INST] families have none).
/// `bos`/`eos` are the vocab's BOS/EOS piece texts (e.g. "<s>", "</s>"). As llama.cpp,
/// the renderers spell "<s>"/"</s>" literally, except Zephyr, which ends turns with
/// `eos` (llama.cpp hardcodes "<|endoftext|>", the EOS of the StableLM Zephyr models;
/// with that `eos` the output is identical). No template renders a leading BOS.
///
/// Plain (models without a template): each message is one line "Role: content\n"
/// where Role is "System", "User" or "Assistant" (other roles: the role with its first
/// letter upper-cased); the generation prompt is "Assistant:" (no trailing space, so
/// the model's first token carries the space). Example:
///   "System: Be brief.\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:"
///
/// `content_spans` (optional) receives the byte ranges of the result that are message
/// content (in order, disjoint): Tokenizer::encode_chat keeps special-token text there
/// plain, so that a user cannot write control tokens (vLLM PR #31735 fixed the same).
std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos, const std::string& eos,
                        std::vector<TextSpan>* content_spans = nullptr);

}  // namespace pdserve::tokenizer
