// Special-token fix-ups, following llama.cpp src/llama-vocab.cpp (llama_vocab::impl::load,
// "auto-detect special tokens by text" through "Handle per token attributes"). llama.cpp
// walks an unordered_map, so when several candidate texts exist its pick depends on hash
// order; we take the first candidate in list order instead.
#include "tokenizer/vocab_special.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

namespace pdserve::tokenizer {

namespace {

using Texts = std::initializer_list<const char*>;

const Texts kEot = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                    "<end_of_utterance>"};
const Texts kEom = {"<|eom_id|>"};
const Texts kFimPre = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                       "▁<PRE>", "<|code_prefix|>", "<|prefix|>"};
const Texts kFimSuf = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                       "▁<SUF>", "<|code_suffix|>", "<|suffix|>"};
const Texts kFimMid = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                       "▁<MID>", "<|code_middle|>", "<|middle|>"};
const Texts kFimPad = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const Texts kFimRep = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const Texts kFimSep = {"<|file_sep|>"};
// Texts that end generation (llama.cpp's special_eog_ids list).
const Texts kEog = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                    "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["};

/// llama.cpp ORs CONTROL into the attributes of control-looking tokens; for everything
/// we derive from attributes (token_to_piece, special splitting) CONTROL then dominates.
void make_control(Vocab& v, int32_t id) { v.types[id] = TokenType::CONTROL; }

/// Sets `*slot` to the first present text of `texts` when unset; marks it control.
int32_t detect(Vocab& v, Texts texts, int32_t& slot) {
  if (slot >= 0) return slot;
  for (const char* t : texts) {
    int32_t id = v.find(t);
    if (id >= 0) {
      slot = id;
      make_control(v, id);
      break;
    }
  }
  return slot;
}

void add_eog(std::vector<int32_t>& eog, int32_t id) {
  if (id >= 0 && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
}

bool eog_has(const Vocab& v, const char* text, int32_t* id_out = nullptr) {
  for (int32_t id : v.eog_ids) {
    if (v.tokens[id] == text) {
      if (id_out) *id_out = id;
      return true;
    }
  }
  return false;
}

void remove_eog(Vocab& v, int32_t id) {
  v.eog_ids.erase(std::remove(v.eog_ids.begin(), v.eog_ids.end(), id), v.eog_ids.end());
}

void build_eog(Vocab& v) {
  int32_t eom = -1, fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  detect(v, kEot, v.eot_id);
  detect(v, kEom, eom);
  detect(v, kFimPre, fim_pre);
  detect(v, kFimSuf, fim_suf);
  detect(v, kFimMid, fim_mid);
  detect(v, kFimPad, fim_pad);
  detect(v, kFimRep, fim_rep);
  detect(v, kFimSep, fim_sep);

  std::vector<int32_t>& eog = v.eog_ids;
  eog.clear();
  add_eog(eog, fim_pad);
  add_eog(eog, fim_rep);
  add_eog(eog, fim_sep);
  for (const char* t : kEog) {
    int32_t id = v.find(t);
    if (id < 0) continue;
    add_eog(eog, id);
    make_control(v, id);
  }
  // gpt-oss: always render these (llama.cpp "quick hack").
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (int32_t id = v.find(t); id >= 0) v.types[id] = TokenType::USER_DEFINED;
  }
  add_eog(eog, v.eos_id);
  add_eog(eog, v.eot_id);
  add_eog(eog, eom);

  // o200k_harmony / solar-open: "<|end|>" is not end-of-generation there.
  int32_t end_id = -1;
  const bool has_end = eog_has(v, "<|end|>", &end_id);
  const bool has_call = eog_has(v, "<|call|>") || eog_has(v, "<|calls|>");
  if (has_end && has_call && (eog_has(v, "<|return|>") || eog_has(v, "<|flush|>"))) {
    remove_eog(v, end_id);
    v.types[end_id] = TokenType::USER_DEFINED;
  }
  // gemma4 / paddleocr: "</s>" is not end-of-generation there.
  int32_t s_id = -1;
  if (eog_has(v, "<|tool_response>") && eog_has(v, "</s>", &s_id)) {
    remove_eog(v, s_id);
    v.types[s_id] = TokenType::NORMAL;
  }
  std::sort(eog.begin(), eog.end());
}

void build_special_cache(Vocab& v) {
  v.special_ids.clear();
  for (int32_t id = 0; id < v.size(); ++id) {
    TokenType t = v.types[id];
    if (t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN)
      v.special_ids.push_back(id);
  }
  std::stable_sort(v.special_ids.begin(), v.special_ids.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });
}

void set_strip(Vocab& v, const char* text, uint8_t flag, bool on) {
  int32_t id = v.find(text);
  if (id < 0) return;
  v.strip[id] = on ? (v.strip[id] | flag) : (v.strip[id] & ~flag);
}

void build_strip(Vocab& v, const std::string& model_name) {
  v.strip.assign(v.tokens.size(), 0);
  std::string name = model_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : v.special_ids) v.strip[id] |= Vocab::kRstrip;
    set_strip(v, "</s>", Vocab::kRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_strip(v, t, Vocab::kRstrip, false);
  }
}

}  // namespace

void finish_special_tokens(Vocab& v, const std::string& model_name) {
  build_eog(v);
  build_special_cache(v);
  build_strip(v, model_name);
}

}  // namespace pdserve::tokenizer
