// The body of the tokenizer fuzz targets (fuzz_tokenizer_spm.cc, fuzz_tokenizer_bpe.cc):
// arbitrary bytes through encode (with and without BOS and special-token parsing),
// encode_chat with arbitrary plain spans, decode and the streaming decoder.
// Input: byte 0 picks the vocabulary and the flags, the rest is the text.
// Invariants: ids are in the vocabulary; special-token parsing off ⇒ no control token
// appears that was not added (BOS/EOS); encode_chat with the whole text plain equals
// encode without special parsing; encode_chat without plain spans equals encode with it;
// the streaming decoder's output equals decode.
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

#include "fuzz_util.h"

namespace pdserve::fuzz {

inline void fuzz_tokenizer(const std::vector<LoadedVocab>& vocabs, const uint8_t* data, size_t size) {
  if (size < 1) return;
  const uint8_t sel = data[0];
  const tokenizer::Tokenizer& tok = *vocabs[(sel >> 3) % vocabs.size()].tok;
  const bool add_bos = sel & 1, parse_special = sel & 2, chat = sel & 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int32_t n = tok.vocab().size();
  const auto in_range = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) PDS_FUZZ_CHECK(id >= 0 && id < n, "token id in range");
  };
  std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
  in_range(ids);
  if (!parse_special) {
    const auto& v = tok.vocab();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (v.types[ids[i]] != tokenizer::TokenType::CONTROL) continue;
      const bool added = (i == 0 && add_bos && ids[i] == v.bos_id) || (i + 1 == ids.size() && v.add_eos && ids[i] == v.eos_id);
      PDS_FUZZ_CHECK(added, "control token from plain text");
    }
  }
  if (chat) {
    // The whole text plain, none plain, and spans cut from the text's bytes.
    PDS_FUZZ_CHECK(tok.encode_chat(text, add_bos, {{0, text.size()}}) == tok.encode(text, add_bos, false),
                   "encode_chat all plain == encode without special parsing");
    PDS_FUZZ_CHECK(tok.encode_chat(text, add_bos, {}) == tok.encode(text, add_bos, true),
                   "encode_chat no plain == encode with special parsing");
    std::vector<tokenizer::TextSpan> spans;
    for (size_t off = 0; off + 2 <= text.size() && spans.size() < 8;) {
      const size_t gap = static_cast<uint8_t>(text[off]) % 16;
      const size_t len = std::min<size_t>(static_cast<uint8_t>(text[off + 1]) % 24, text.size() - off);
      spans.push_back({off, len});
      off += len + gap + 1;
    }
    in_range(tok.encode_chat(text, add_bos, spans));
  }
  const std::string decoded = tok.decode(ids);
  tokenizer::StreamDecoder sd(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += sd.push(id);
  streamed += sd.flush();
  PDS_FUZZ_CHECK(streamed == decoded, "stream decoder == decode");
}

}  // namespace pdserve::fuzz
