// Native chat template rendering, byte-exact with llama.cpp llm_chat_apply_template
// (src/llama-chat.cpp) for the families pdserve recognises, plus the Plain format.
#include <cctype>

#include "tokenizer/chat_template.h"

namespace pdserve::tokenizer {

namespace {

using Messages = std::vector<ChatMessage>;
using K = ChatTemplateKind;

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// Trims ASCII whitespace at both ends (llama.cpp's trim in llama-chat.cpp).
std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string chatml(const Messages& msgs, bool gen) {
  std::string ss;
  for (const auto& m : msgs) ss += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) ss += "<|im_start|>assistant\n";
  return ss;
}

std::string mistral_v7(const Messages& msgs, bool tekken) {
  const std::string sp = tekken ? "" : " ";
  std::string ss;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      ss += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      ss += "[INST]" + sp + m.content + "[/INST]";
    } else {
      ss += sp + m.content + "</s>";
    }
  }
  return ss;
}

std::string mistral_v1_v3(const Messages& msgs, K kind) {
  const std::string leading = kind == K::MistralV1 ? " " : "";
  const std::string trailing = kind == K::MistralV3Tekken ? "" : " ";
  const bool trim_assistant = kind == K::Mistral;
  bool inside_turn = false;
  std::string ss;
  for (const auto& m : msgs) {
    if (!inside_turn) {
      ss += leading + "[INST]" + trailing;
      inside_turn = true;
    }
    if (m.role == "system") {
      ss += m.content + "\n\n";
    } else if (m.role == "user") {
      ss += m.content + leading + "[/INST]";
    } else {
      ss += trailing + (trim_assistant ? trim(m.content) : m.content) + "</s>";
      inside_turn = false;
    }
  }
  return ss;
}

std::string llama2(const Messages& msgs, K kind) {
  const bool system_block = kind != K::Llama2NoSys;
  const bool bos_in_history = kind == K::Llama2SysBos;
  const bool strip = kind == K::Llama2SysStrip;
  bool inside_turn = true;  // the first [INST] is written up front, without BOS
  std::string ss = "[INST] ";
  for (const auto& m : msgs) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!inside_turn) {
      inside_turn = true;
      ss += bos_in_history ? "<s>[INST] " : "[INST] ";
    }
    if (m.role == "system") {
      ss += system_block ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
    } else if (m.role == "user") {
      ss += content + " [/INST]";
    } else {
      ss += content + "</s>";
      inside_turn = false;
    }
  }
  return ss;
}

std::string phi3(const Messages& msgs, bool gen) {
  std::string ss;
  for (const auto& m : msgs) ss += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  if (gen) ss += "<|assistant|>\n";
  return ss;
}

std::string zephyr(const Messages& msgs, bool gen, const std::string& eos) {
  const std::string end = eos.empty() ? "<|endoftext|>" : eos;
  std::string ss;
  for (const auto& m : msgs) ss += "<|" + m.role + "|>\n" + m.content + end + "\n";
  if (gen) ss += "<|assistant|>\n";
  return ss;
}

std::string llama3(const Messages& msgs, bool gen) {
  std::string ss;
  for (const auto& m : msgs)
    ss += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (gen) ss += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return ss;
}

std::string plain(const Messages& msgs, bool gen) {
  std::string ss;
  for (const auto& m : msgs) {
    // "system" → "System", "user" → "User", "assistant" → "Assistant", "tool" → "Tool".
    std::string role = m.role;
    if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    ss += role + ": " + m.content + "\n";
  }
  if (gen) ss += "Assistant:";
  return ss;
}

}  // namespace

std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos, const std::string& eos) {
  (void)bos;  // llama.cpp's renderers spell "<s>" literally where they use it
  switch (kind) {
    case K::ChatML: return chatml(messages, add_generation_prompt);
    case K::MistralV7: return mistral_v7(messages, false);
    case K::MistralV7Tekken: return mistral_v7(messages, true);
    case K::Mistral:
    case K::MistralV1:
    case K::MistralV3Tekken: return mistral_v1_v3(messages, kind);
    case K::Llama2:
    case K::Llama2NoSys:
    case K::Llama2SysBos:
    case K::Llama2SysStrip: return llama2(messages, kind);
    case K::Phi3: return phi3(messages, add_generation_prompt);
    case K::Zephyr: return zephyr(messages, add_generation_prompt, eos);
    case K::Llama3: return llama3(messages, add_generation_prompt);
    case K::Plain: break;
  }
  return plain(messages, add_generation_prompt);
}

}  // namespace pdserve::tokenizer
