// Load-time special-token fix-ups of llama.cpp's llama_vocab::impl::load that GGUF does
// not store: EOT/EOM/FIM detection by text, the end-of-generation set, the special-token
// cache and per-model strip attributes.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

/// Fills v.eog_ids, v.special_ids and v.strip, detects EOT by text when the GGUF has no
/// eot_token_id, and re-types tokens the way llama.cpp overrides their attributes.
/// `model_name` is `general.name` (llama.cpp sets RSTRIP on Phi-3's special tokens).
void finish_special_tokens(Vocab& v, const std::string& model_name);

}  // namespace pdserve::tokenizer
