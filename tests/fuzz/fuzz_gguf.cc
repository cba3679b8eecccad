// libFuzzer target: the GGUF reader (src/gguf/gguf_reader.cc) on arbitrary files — header,
// metadata of every value type, tensor infos and data offsets — and what is built from a
// file that opens: the model config, the vocabulary and the tokenizer.
// Invariants: every tensor's data lies inside the file; every metadata value has the type
// its tag says; an opened file re-serialised by the writer opens again with the same
// metadata.
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

using namespace pdserve;

namespace {

void check_value(const gguf::Value& v, int depth) {
  PDS_FUZZ_CHECK(depth < 8, "array nesting");
  switch (v.type) {
    case gguf::ValueType::STRING: PDS_FUZZ_CHECK(v.as_string() != nullptr, "string value"); break;
    case gguf::ValueType::ARRAY: {
      const gguf::Array* a = v.as_array();
      PDS_FUZZ_CHECK(a != nullptr, "array value");
      for (const gguf::Value& e : a->items) {
        PDS_FUZZ_CHECK(e.type == a->elem_type, "array element type");
        check_value(e, depth + 1);
      }
      break;
    }
    case gguf::ValueType::FLOAT32:
    case gguf::ValueType::FLOAT64: PDS_FUZZ_CHECK(v.as_float().has_value(), "float value"); break;
    default: PDS_FUZZ_CHECK(v.as_int().has_value(), "integer value"); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::MemFile mf(data, size);
  auto opened = gguf::GgufFile::open(mf.path());
  if (!opened.ok()) return 0;
  const gguf::GgufFile& f = *opened.value();
  for (const auto& [key, value] : f.metadata()) {
    check_value(value, 0);
    PDS_FUZZ_CHECK(f.find(key) != nullptr, "metadata lookup");
  }
  volatile uint8_t sink = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.nbytes > 0) {
      PDS_FUZZ_CHECK(t.data != nullptr, "tensor data pointer");
      sink = sink ^ t.data[0];
      sink = sink ^ t.data[t.nbytes - 1];  // a read outside the mapping faults
    }
    (void)t.n_elements();
    (void)t.rows();
  }
  (void)sink;
  // What the server builds from a file.
  auto cfg = model::ModelConfig::from_gguf(f);
  if (cfg.ok()) {
    const model::ModelConfig& c = cfg.value();
    PDS_FUZZ_CHECK(c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.head_dim > 0, "config positive");
    PDS_FUZZ_CHECK(c.rope_dim >= 2 && c.rope_dim <= c.head_dim, "rope dim");
  }
  auto tok = tokenizer::Tokenizer::from_gguf(f);
  if (tok.ok()) {
    const auto ids = tok.value()->encode("Hello world <s> 123", true, true);
    for (int32_t id : ids) PDS_FUZZ_CHECK(id >= 0 && id < tok.value()->vocab().size(), "token id in range");
    (void)tok.value()->decode(ids);
  }
  // Round trip through the writer (metadata only: tensor data may be huge or overlap).
  if (f.tensors().empty()) {
    gguf::GgufWriter w;
    for (const auto& [key, value] : f.metadata())
      if (key != "general.alignment") w.set(key, value);
    const std::vector<uint8_t> bytes = w.serialize();
    fuzz::MemFile mf2(bytes.data(), bytes.size());
    auto again = gguf::GgufFile::open(mf2.path());
    PDS_FUZZ_CHECK(again.ok(), "re-serialised file opens");
    PDS_FUZZ_CHECK(again.value()->metadata().size() + (f.find("general.alignment") ? 1 : 0) == f.metadata().size(),
                   "re-serialised metadata count");
  }
  return 0;
}
