// Splits raw text on special-token texts before the model tokenizer runs
// (llama.cpp llama_vocab::impl::tokenizer_st_partition). Shared by SPM and BPE.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

/// A piece of the input: either a special token or a byte range of raw text.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token; -1: raw text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
  bool is_text() const { return token < 0; }
};

/// Fragments of `text`. Each special token of `v.special_ids` (longest first) splits the
/// raw fragments at its occurrences; control and unknown tokens only when `parse_special`
/// (user-defined tokens always). Strip flags drop whitespace next to a matched token.
/// `plain` (optional; sorted, disjoint): byte ranges where control and unknown tokens are
/// not matched even with `parse_special` (a match overlapping one is skipped).
std::vector<Fragment> partition_special(const Vocab& v, std::string_view text, bool parse_special,
                                        const std::vector<TextSpan>* plain = nullptr);

}  // namespace pdserve::tokenizer
