// libFuzzer target: the byte-level BPE tokenizer (src/tokenizer/bpe_tokenizer.cc) with the vocabularies
// of GPT-2, DeepSeek LLM and the synthetic Qwen2 model (their pre-tokenizer regexes); see
// tokenizer_fuzz.h for the input format and invariants.
#include "tokenizer_fuzz.h"

using namespace pdserve;

static std::vector<fuzz::LoadedVocab>* vocabs;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs = new std::vector<fuzz::LoadedVocab>();
  vocabs->push_back(fuzz::load_vocab("tokenizer/ggml-vocab-gpt-2.gguf"));
  vocabs->push_back(fuzz::load_vocab("tokenizer/ggml-vocab-deepseek-llm.gguf"));
  vocabs->push_back(fuzz::load_vocab("models/synth-qwen2-small-q8_0.gguf"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::fuzz_tokenizer(*vocabs, data, size);
  return 0;
}
