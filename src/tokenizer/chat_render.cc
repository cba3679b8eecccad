// Native chat template rendering, byte-exact with llama.cpp llm_chat_apply_template
// (src/llama-chat.cpp) for the families pdserve recognises, plus the Plain format.
#include <cctype>

#include "tokenizer/chat_template.h"

namespace pdserve::tokenizer {

namespace {

using Messages = std::vector<ChatMessage>;
using K = ChatTemplateKind;

/// The rendered text, with the byte ranges that came from message content recorded.
struct Out {
  std::string ss;
  std::vector<TextSpan>* spans;
  Out& operator+=(const std::string& template_text) {
    ss += template_text;
    return *this;
  }
  /// Appends message content (recorded as a plain span).
  void content(const std::string& c) {
    if (spans && !c.empty()) spans->push_back({ss.size(), c.size()});
    ss += c;
  }
};

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// Trims ASCII whitespace at both ends (llama.cpp's trim in llama-chat.cpp).
std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

void chatml(const Messages& msgs, bool gen, Out& ss) {
  for (const auto& m : msgs) {
    ss += "<|im_start|>" + m.role + "\n";
    ss.content(m.content);
    ss += "<|im_end|>\n";
  }
  if (gen) ss += "<|im_start|>assistant\n";
}

void mistral_v7(const Messages& msgs, bool tekken, Out& ss) {
  const std::string sp = tekken ? "" : " ";
  for (const auto& m : msgs) {
    if (m.role == "system") {
      ss += "[SYSTEM_PROMPT]" + sp;
      ss.content(m.content);
      ss += "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      ss += "[INST]" + sp;
      ss.content(m.content);
      ss += "[/INST]";
    } else {
      ss += sp;
      ss.content(m.content);
      ss += "</s>";
    }
  }
}

void mistral_v1_v3(const Messages& msgs, K kind, Out& ss) {
  const std::string leading = kind == K::MistralV1 ? " " : "";
  const std::string trailing = kind == K::MistralV3Tekken ? "" : " ";
  const bool trim_assistant = kind == K::Mistral;
  bool inside_turn = false;
  for (const auto& m : msgs) {
    if (!inside_turn) {
      ss += leading + "[INST]" + trailing;
      inside_turn = true;
    }
    if (m.role == "system") {
      ss.content(m.content);
      ss += "\n\n";
    } else if (m.role == "user") {
      ss.content(m.content);
      ss += leading + "[/INST]";
    } else {
      ss += trailing;
      ss.content(trim_assistant ? trim(m.content) : m.content);
      ss += "</s>";
      inside_turn = false;
    }
  }
}

void llama2(const Messages& msgs, K kind, Out& ss) {
  const bool system_block = kind != K::Llama2NoSys;
  const bool bos_in_history = kind == K::Llama2SysBos;
  const bool strip = kind == K::Llama2SysStrip;
  bool inside_turn = true;  // the first [INST] is written up front, without BOS
  ss += "[INST] ";
  for (const auto& m : msgs) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!inside_turn) {
      inside_turn = true;
      ss += bos_in_history ? "<s>[INST] " : "[INST] ";
    }
    if (m.role == "system") {
      if (system_block) ss += "<<SYS>>\n";
      ss.content(content);
      ss += system_block ? "\n<</SYS>>\n\n" : "\n";
    } else if (m.role == "user") {
      ss.content(content);
      ss += " [/INST]";
    } else {
      ss.content(content);
      ss += "</s>";
      inside_turn = false;
    }
  }
}

void phi3(const Messages& msgs, bool gen, Out& ss) {
  for (const auto& m : msgs) {
    ss += "<|" + m.role + "|>\n";
    ss.content(m.content);
    ss += "<|end|>\n";
  }
  if (gen) ss += "<|assistant|>\n";
}

void zephyr(const Messages& msgs, bool gen, const std::string& eos, Out& ss) {
  const std::string end = eos.empty() ? "<|endoftext|>" : eos;
  for (const auto& m : msgs) {
    ss += "<|" + m.role + "|>\n";
    ss.content(m.content);
    ss += end + "\n";
  }
  if (gen) ss += "<|assistant|>\n";
}

void llama3(const Messages& msgs, bool gen, Out& ss) {
  for (const auto& m : msgs) {
    ss += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    ss.content(trim(m.content));
    ss += "<|eot_id|>";
  }
  if (gen) ss += "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

void plain(const Messages& msgs, bool gen, Out& ss) {
  for (const auto& m : msgs) {
    // "system" → "System", "user" → "User", "assistant" → "Assistant", "tool" → "Tool".
    std::string role = m.role;
    if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    ss += role + ": ";
    ss.content(m.content);
    ss += "\n";
  }
  if (gen) ss += "Assistant:";
}

}  // namespace

std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos, const std::string& eos,
                        std::vector<TextSpan>* content_spans) {
  (void)bos;  // llama.cpp's renderers spell "<s>" literally where they use it
  if (content_spans) content_spans->clear();
  Out out{std::string(), content_spans};
  const bool gen = add_generation_prompt;
  switch (kind) {
    case K::ChatML: chatml(messages, gen, out); break;
    case K::MistralV7: mistral_v7(messages, false, out); break;
    case K::MistralV7Tekken: mistral_v7(messages, true, out); break;
    case K::Mistral:
    case K::MistralV1:
    case K::MistralV3Tekken: mistral_v1_v3(messages, kind, out); break;
    case K::Llama2:
    case K::Llama2NoSys:
    case K::Llama2SysBos:
    case K::Llama2SysStrip: llama2(messages, kind, out); break;
    case K::Phi3: phi3(messages, gen, out); break;
    case K::Zephyr: zephyr(messages, gen, eos, out); break;
    case K::Llama3: llama3(messages, gen, out); break;
    case K::Plain: plain(messages, gen, out); break;
  }
  return std::move(out.ss);
}

}  // namespace pdserve::tokenizer
