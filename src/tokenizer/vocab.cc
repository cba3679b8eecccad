// Vocab::from_gguf: reads the `tokenizer.ggml.*` metadata the way llama.cpp's
// llama_vocab::impl::load does (defaults per tokenizer model, special-id range checks).
#include "base/log.h"
#include "base/sha256.h"
#include "tokenizer/bpe_pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_special.h"

namespace pdserve::tokenizer {

namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";

Status missing(const char* key) {
  return Status::NotFound(std::string("missing required metadata key '") + key + "'");
}

Status invalid(const char* key, const char* what) {
  return Status::InvalidArgument(std::string("metadata key '") + key + "' " + what);
}

/// Reads the pieces; empty pieces become "[EMPTY_i]" and duplicates are an error (llama.cpp).
Status read_tokens(const gguf::GgufFile& f, Vocab& v) {
  const gguf::Value* val = f.find(kTokens);
  if (!val) return missing(kTokens);
  const gguf::Array* a = val->as_array();
  if (!a || (a->elem_type != gguf::ValueType::STRING && !a->items.empty()))
    return invalid(kTokens, "must be an array of strings");
  if (a->items.empty()) return invalid(kTokens, "is empty");
  v.tokens.reserve(a->items.size());
  v.token_to_id.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    const std::string* s = a->items[i].as_string();
    if (!s) return invalid(kTokens, "must be an array of strings");
    std::string word = s->empty() ? "[EMPTY_" + std::to_string(i) + "]" : *s;
    auto [it, fresh] = v.token_to_id.emplace(word, static_cast<int32_t>(i));
    if (!fresh)
      return Status::InvalidArgument("duplicate token in vocabulary: '" + word + "' has ids " +
                           std::to_string(it->second) + " and " + std::to_string(i));
    v.tokens.push_back(std::move(word));
  }
  return Status::Ok();
}

/// Optional per-token numeric array (scores, token types) of at least n entries.
Result<const gguf::Array*> optional_array(const gguf::GgufFile& f, const char* key, size_t n) {
  const gguf::Value* val = f.find(key);
  if (!val) return static_cast<const gguf::Array*>(nullptr);
  const gguf::Array* a = val->as_array();
  if (!a) return invalid(key, "must be an array");
  if (a->items.size() < n)
    return Status::InvalidArgument(std::string("metadata key '") + key + "' has " + std::to_string(a->items.size()) +
                         " entries for " + std::to_string(n) + " tokens");
  return a;
}

Status read_scores_and_types(const gguf::GgufFile& f, Vocab& v) {
  const size_t n = v.tokens.size();
  auto scores = optional_array(f, kScores, n);
  if (!scores.ok()) return scores.status();
  auto types = optional_array(f, kTypes, n);
  if (!types.ok()) return types.status();
  v.scores.assign(n, 0.0f);
  v.types.assign(n, TokenType::NORMAL);
  for (size_t i = 0; i < n; ++i) {
    if (*scores) {
      auto x = (*scores)->items[i].as_float();
      if (!x) return invalid(kScores, "must hold numbers");
      v.scores[i] = static_cast<float>(*x);
    }
    if (*types) {
      auto t = (*types)->items[i].as_int();
      if (!t) return invalid(kTypes, "must hold integers");
      // Unknown values are UNDEFINED, as in llama.cpp.
      v.types[i] = (*t >= 0 && *t <= 6) ? static_cast<TokenType>(*t) : TokenType::UNDEFINED;
    }
  }
  return Status::Ok();
}

/// Special ids: model defaults (llama.cpp) overridden by the GGUF keys when in range.
void read_special_ids(const gguf::GgufFile& f, Vocab& v, const BpePreConfig* bpe) {
  if (v.model == "llama") {
    v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
  } else if (v.model == "gpt2") {
    v.bos_id = 11, v.eos_id = 11;
    if (bpe && bpe->no_bos) v.bos_id = -1;
  }
  const std::pair<const char*, int32_t*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos_id},     {"tokenizer.ggml.eos_token_id", &v.eos_id},
      {"tokenizer.ggml.unknown_token_id", &v.unk_id}, {"tokenizer.ggml.padding_token_id", &v.pad_id},
      {"tokenizer.ggml.eot_token_id", &v.eot_id},
  };
  for (auto [key, id] : keys) {
    if (*id >= v.size()) *id = -1;  // default out of range: disabled
    auto x = f.get_int(key);
    if (!x) continue;
    if (*x < 0 || *x >= v.size()) {
      PDS_LOG_WARN("bad special token: '{}' = {}, using default id {}", key, *x, *id);
    } else {
      *id = static_cast<int32_t>(*x);
    }
  }
}

}  // namespace

int32_t Vocab::find(std::string_view text) const {
  auto it = token_to_id.find(std::string(text));
  return it == token_to_id.end() ? -1 : it->second;
}

std::string vocab_fingerprint(const Vocab& v) {
  Sha256 h;
  auto field = [&h](std::string_view s) {  // length-prefixed, so fields cannot run together
    const uint64_t n = s.size();
    h.update(&n, sizeof n);
    h.update(s);
  };
  field(v.model);
  field(v.pre);
  const uint64_t counts[3] = {v.tokens.size(), v.scores.size(), v.merges.size()};
  h.update(counts, sizeof counts);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    field(v.tokens[i]);
    const float score = i < v.scores.size() ? v.scores[i] : 0.0f;
    const int32_t type = i < v.types.size() ? static_cast<int32_t>(v.types[i]) : -1;
    h.update(&score, sizeof score);
    h.update(&type, sizeof type);
  }
  for (const std::string& m : v.merges) field(m);
  const int32_t ids[5] = {v.bos_id, v.eos_id, v.unk_id, v.pad_id, v.eot_id};
  h.update(ids, sizeof ids);
  const uint8_t flags[3] = {v.add_bos, v.add_eos, v.add_space_prefix};
  h.update(flags, sizeof flags);
  return to_hex(h.digest()).substr(0, 16);
}

Result<Vocab> Vocab::from_gguf(const gguf::GgufFile& f) {
  Vocab v;
  const gguf::Value* model = f.find(kModel);
  if (!model) return missing(kModel);
  if (!model->as_string()) return invalid(kModel, "must be a string");
  v.model = *model->as_string();
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");

  // llama.cpp defaults: SPM adds BOS and a space prefix; BPE no space prefix, and BOS only
  // for some pre-tokenizers (llama3, ...). The GGUF keys override both.
  const bool spm = v.model == "llama";
  const std::optional<BpePreConfig> bpe = v.model == "gpt2" ? bpe_pre_config(v.pre) : std::nullopt;
  v.add_bos = spm || (bpe && bpe->add_bos);
  v.add_eos = false;
  v.add_space_prefix = spm;
  if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;

  if (Status s = read_tokens(f, v); !s.ok()) return s;
  if (Status s = read_scores_and_types(f, v); !s.ok()) return s;
  read_special_ids(f, v, bpe ? &*bpe : nullptr);
  if (const gguf::Array* m = f.get_array("tokenizer.ggml.merges")) {
    v.merges.reserve(m->items.size());
    for (const gguf::Value& x : m->items) {
      if (!x.as_string()) return invalid("tokenizer.ggml.merges", "must be an array of strings");
      v.merges.push_back(*x.as_string());
    }
  }

  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
  if (v.add_bos && v.bos_id < 0)
    return Status::InvalidArgument("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  if (v.add_eos && v.eos_id < 0)
    return Status::InvalidArgument("tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");

  v.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  finish_special_tokens(v, f.get_string("general.name").value_or(""));
  return v;
}

}  // namespace pdserve::tokenizer
