// libFuzzer target: the SPM tokenizer (src/tokenizer/spm_tokenizer.cc) with the vocabularies
// of stories260K, llama (SentencePiece) and Phi-3 (lstrip/rstrip special tokens); see
// tokenizer_fuzz.h for the input format and invariants.
#include "tokenizer_fuzz.h"

using namespace pdserve;

static std::vector<fuzz::LoadedVocab>* vocabs;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs = new std::vector<fuzz::LoadedVocab>();
  vocabs->push_back(fuzz::load_vocab("models/stories260K.gguf"));
  vocabs->push_back(fuzz::load_vocab("tokenizer/ggml-vocab-llama-spm.gguf"));
  vocabs->push_back(fuzz::load_vocab("tokenizer/ggml-vocab-phi-3.gguf"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::fuzz_tokenizer(*vocabs, data, size);
  return 0;
}
