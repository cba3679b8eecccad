#include "server/tokenize_api.h"

#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace pdserve::server {
namespace {

/// A boolean field, or `dflt` when absent or null; an error names a non-boolean.
std::optional<ApiError> read_flag(const json& body, const char* name, bool dflt, bool& out) {
  out = dflt;
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request("Invalid '" + std::string(name) + "': expected a boolean, but got " + json_type_phrase(*it) + ".", name);
  out = it->get<bool>();
  return std::nullopt;
}

/// The text a token stands for, control tokens included (their own text).
std::string piece_with_special(const tokenizer::Tokenizer& tok, int32_t id) {
  const auto& v = tok.vocab();
  const auto type = v.types[static_cast<size_t>(id)];
  if (type == tokenizer::TokenType::CONTROL || type == tokenizer::TokenType::UNKNOWN) return v.tokens[static_cast<size_t>(id)];
  return tok.token_to_piece(id);
}

}  // namespace

std::optional<ApiError> tokenize_request(const json& body, const PromptEncoder& enc, const tokenizer::Tokenizer& tok,
                                         int64_t context_length, json& out) {
  if (!body.is_object()) return bad_request("The request body must be a JSON object, but got " + json_type_phrase(body) + ".");
  if (int(body.contains("messages")) + int(body.contains("prompt")) + int(body.contains("content")) > 1)
    return bad_request("Give one of 'prompt', 'messages' (vLLM) or 'content' (llama.cpp), not several.");
  // vLLM's reply: the count, the context length, the ids and (return_token_strs) their texts.
  const auto vllm_reply = [&](const std::vector<int32_t>& ids, bool strs) {
    out = {{"count", ids.size()}, {"max_model_len", context_length}, {"tokens", ids}};
    if (!strs) return;
    json list = json::array();
    for (int32_t id : ids) list.push_back(token_display(piece_with_special(tok, id)));
    out["token_strs"] = std::move(list);
  };
  if (body.contains("messages")) {
    ParsedRequest p = parse_chat_json(body);
    if (!p.ok()) return *p.error;
    bool strs = false;
    if (auto err = read_flag(body, "return_token_strs", false, strs)) return err;
    std::vector<std::vector<int32_t>> ids;
    if (auto err = enc.encode(p.request, context_length, ids)) return err;  // as the chat endpoint bounds it
    vllm_reply(ids[0], strs);
    return std::nullopt;
  }
  const bool llama = body.contains("content");  // llama.cpp's shape
  const char* field = llama ? "content" : "prompt";
  auto it = body.find(field);
  if (it == body.end() || !it->is_string())
    return bad_request(std::string("Invalid '") + field + "': expected a string" +
                           (it == body.end() ? " (or 'messages')." : ", but got " + json_type_phrase(*it) + "."),
                       field);
  // Bounded as /v1/completions bounds a text prompt (a few MB of text would take seconds and
  // hold tens of times its size in ids and pieces): what the context can hold.
  const size_t bytes = it->get_ref<const std::string&>().size();
  if (context_length > 0 && enc.max_bytes_per_token() > 0 &&
      bytes > static_cast<size_t>(context_length) * enc.max_bytes_per_token())
    return bad_request("The text is " + std::to_string(bytes) + " bytes long, more than this model's context of " +
                           std::to_string(context_length) + " tokens can hold (at most " +
                           std::to_string(enc.max_bytes_per_token()) + " bytes per token).",
                       field, std::string("context_length_exceeded"));
  bool add_special = false, parse_special = false, pieces = false;
  if (llama) {
    if (auto err = read_flag(body, "add_special", false, add_special)) return err;
    if (auto err = read_flag(body, "parse_special", true, parse_special)) return err;
    if (auto err = read_flag(body, "with_pieces", false, pieces)) return err;
  } else {
    if (auto err = read_flag(body, "add_special_tokens", true, add_special)) return err;
    if (auto err = read_flag(body, "return_token_strs", false, pieces)) return err;
  }
  const std::vector<int32_t> ids = tok.encode(it->get<std::string>(), add_special && tok.vocab().add_bos, parse_special);
  if (llama) {
    if (!pieces) {
      out = {{"tokens", ids}};
      return std::nullopt;
    }
    json list = json::array();
    for (int32_t id : ids) {  // llama.cpp: the piece as text when it is valid UTF-8, else its bytes
      const std::string piece = piece_with_special(tok, id);
      list.push_back({{"id", id}, {"piece", is_valid_utf8(piece) ? json(piece) : json(token_bytes(piece))}});
    }
    out = {{"tokens", std::move(list)}};
    return std::nullopt;
  }
  vllm_reply(ids, pieces);
  return std::nullopt;
}

std::optional<ApiError> detokenize_request(const json& body, const tokenizer::Tokenizer& tok, json& out) {
  if (!body.is_object()) return bad_request("The request body must be a JSON object, but got " + json_type_phrase(body) + ".");
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return bad_request("Invalid 'tokens': expected an array of token ids.", "tokens");
  std::string text;
  for (const json& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab().size())
      return bad_request("Invalid 'tokens': " + t.dump() + " is not a token id of this model (0 to " +
                             std::to_string(tok.vocab().size() - 1) + ").",
                         "tokens");
    text += piece_with_special(tok, static_cast<int32_t>(t.get<int64_t>()));
  }
  out = {{"prompt", text}, {"content", text}};
  return std::nullopt;
}

}  // namespace pdserve::server
