// Tokenizer factory and the model-independent helpers.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_partition.h"
#include "tokenizer/spm_tokenizer.h"

namespace pdserve::tokenizer {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::GgufFile& f) {
  // Reject unsupported models before reading (and complaining about) their vocab.
  auto model = f.get_string("tokenizer.ggml.model");
  if (model && *model != "llama" && *model != "gpt2")
    return Status::InvalidArgument("unsupported tokenizer model '" + *model + "'");
  auto vocab = Vocab::from_gguf(f);
  if (!vocab.ok()) return vocab.status();
  if (vocab->model == "gpt2") {
    auto bpe = BpeTokenizer::create(std::move(vocab).value());
    if (!bpe.ok()) return bpe.status();
    return std::unique_ptr<Tokenizer>(std::move(bpe).value());
  }
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab).value()));
}

std::vector<int32_t> Tokenizer::encode_chat(std::string_view text, bool add_bos,
                                            const std::vector<TextSpan>& plain) const {
  // The special tokens are found here, with the content ranges kept plain; each raw
  // fragment is then encoded as text alone (SPM and BPE encode every fragment of their
  // own partition separately, a space prefix included, so this gives the same ids).
  std::vector<int32_t> out;
  if (add_bos && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  for (const Fragment& f : partition_special(vocab_, text, /*parse_special=*/true, &plain)) {
    if (f.is_text()) {
      const std::vector<int32_t> ids = encode(text.substr(f.offset, f.length), false, false);
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.push_back(f.token);
    }
  }
  if (add_bos && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

void Tokenizer::build_pieces(const std::function<std::string(const std::string&)>& normal_piece) {
  pieces_.resize(vocab_.tokens.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (vocab_.types[id]) {
      case TokenType::NORMAL:
        pieces_[id] = normal_piece(text);
        break;
      case TokenType::USER_DEFINED:
        pieces_[id] = text;
        break;
      case TokenType::BYTE: {
        // llama.cpp token_to_byte: strtol of the two hex digits of "<0xNN>".
        const std::string digits = text.substr(std::min<size_t>(3, text.size()), 2);
        pieces_[id] = std::string(1, static_cast<char>(std::strtol(digits.c_str(), nullptr, 16)));
        break;
      }
      default:  // CONTROL, UNKNOWN (special=false), UNUSED, UNDEFINED
        break;
    }
  }
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::string();
  return pieces_[id];
}

}  // namespace pdserve::tokenizer
