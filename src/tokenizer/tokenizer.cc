// Tokenizer factory and the model-independent helpers.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace pdserve::tokenizer {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::GgufFile& f) {
  // Reject unsupported models before reading (and complaining about) their vocab.
  auto model = f.get_string("tokenizer.ggml.model");
  if (model && *model != "llama" && *model != "gpt2")
    return Status::Error("unsupported tokenizer model '" + *model + "'");
  auto vocab = Vocab::from_gguf(f);
  if (!vocab.ok()) return vocab.status();
  if (vocab->model == "gpt2") {
    auto bpe = BpeTokenizer::create(std::move(vocab).value());
    if (!bpe.ok()) return bpe.status();
    return std::unique_ptr<Tokenizer>(std::move(bpe).value());
  }
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab).value()));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

}  // namespace pdserve::tokenizer
