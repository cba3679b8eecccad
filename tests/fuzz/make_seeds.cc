// Writes the binary seed corpora of tests/fuzz/corpus (GGUF files, KV transfer messages):
//   build-fuzz/fuzz/fuzz_make_seeds tests/fuzz/corpus
// (scripts/fuzz.sh --seeds). The text seeds (requests, templates, grammars, SSE streams) are
// written by hand. Deterministic: the same files every run.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "disagg/grpc_status.h"
#include "disagg/kv_codec.h"
#include "gguf/gguf.h"

using namespace pdserve;
using gguf::Value;
using gguf::ValueType;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

void write_gguf(const std::string& path, const gguf::GgufWriter& w) {
  const std::vector<uint8_t> b = w.serialize();
  write_file(path, std::string(b.begin(), b.end()));
}

Value strings(const std::vector<std::string>& v) {
  std::vector<Value> items;
  for (const auto& s : v) items.push_back(Value::str(s));
  return Value::array(ValueType::STRING, std::move(items));
}
Value ints(const std::vector<int>& v) {
  std::vector<Value> items;
  for (int x : v) items.push_back(Value::i32(x));
  return Value::array(ValueType::INT32, std::move(items));
}
Value floats(size_t n) {
  std::vector<Value> items;
  for (size_t i = 0; i < n; ++i) items.push_back(Value::f32(-static_cast<float>(i)));
  return Value::array(ValueType::FLOAT32, std::move(items));
}

void gguf_seeds(const std::string& dir) {
  {  // metadata of every value type, arrays of several, a nested array; no tensors
    gguf::GgufWriter w;
    w.set("u8", {ValueType::UINT8, uint64_t{200}});
    w.set("i8", {ValueType::INT8, int64_t{-100}});
    w.set("u16", {ValueType::UINT16, uint64_t{60000}});
    w.set("i16", {ValueType::INT16, int64_t{-30000}});
    w.set("u32", Value::u32(4000000000u));
    w.set("i32", Value::i32(-2000000000));
    w.set("f32", Value::f32(1.5f));
    w.set("bool", Value::boolean(true));
    w.set("str", Value::str("hello"));
    w.set("u64", Value::u64(1ull << 40));
    w.set("i64", {ValueType::INT64, int64_t{-(1ll << 40)}});
    w.set("f64", {ValueType::FLOAT64, 2.25});
    w.set("arr.str", strings({"a", "", "ccc"}));
    w.set("arr.i32", ints({1, -2, 3}));
    w.set("arr.f32", floats(3));
    w.set("arr.nested", Value::array(ValueType::ARRAY, {ints({1}), ints({2, 3})}));
    write_gguf(dir + "/metadata_all_types.gguf", w);
  }
  {  // tensors of several types, an explicit alignment
    gguf::GgufWriter w;
    w.set("general.architecture", Value::str("none"));
    w.set("general.alignment", Value::u32(64));
    std::vector<uint8_t> f32(4 * 8, 1), f16(2 * 8, 2), q8(34 * 2, 3);
    w.add_tensor("a.f32", {8}, gguf::GgmlType::F32, f32.data(), f32.size());
    w.add_tensor("b.f16", {4, 2}, gguf::GgmlType::F16, f16.data(), f16.size());
    w.add_tensor("c.q8_0", {32, 2}, gguf::GgmlType::Q8_0, q8.data(), q8.size());
    write_gguf(dir + "/tensors.gguf", w);
  }
  {  // a BPE vocabulary (as tests/unit/tokenizer_bpe_test.cc)
    gguf::GgufWriter w;
    w.set("general.architecture", Value::str("llama"));
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", Value::str("llama-bpe"));
    w.set("tokenizer.ggml.tokens", strings({"a", "b", "c", "ab", "bc", "abc", "<s>", "</s>", "<0x41>", "\xc4\xa0",
                                            "\xc4\xa0" "a", "<|u|>"}));
    w.set("tokenizer.ggml.token_type", ints({1, 1, 1, 1, 1, 1, 3, 3, 6, 1, 1, 4}));
    w.set("tokenizer.ggml.merges", strings({"b c", "a b", "\xc4\xa0 a"}));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(6));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(7));
    write_gguf(dir + "/vocab_bpe.gguf", w);
  }
  {  // an SPM vocabulary with byte fallback
    gguf::GgufWriter w;
    w.set("general.architecture", Value::str("llama"));
    w.set("tokenizer.ggml.model", Value::str("llama"));
    w.set("tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "ab"}));
    w.set("tokenizer.ggml.scores", floats(9));
    w.set("tokenizer.ggml.token_type", ints({2, 3, 3, 6, 1, 1, 1, 1, 1}));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
    w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
    w.set("tokenizer.chat_template", Value::str("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"));
    write_gguf(dir + "/vocab_spm.gguf", w);
  }
  // A tiny llama and qwen2 (1 layer, n_embd 8, 2 heads / 1 KV head, n_ff 16, the SPM vocab
  // above): the config keys and the weight tensors a model file has.
  for (const std::string arch : {"llama", "qwen2"}) {
    gguf::GgufWriter w;
    const int e = 8, ff = 16, kv = 4, nv = 9;
    w.set("general.architecture", Value::str(arch));
    w.set("general.name", Value::str("tiny-" + arch));
    w.set(arch + ".context_length", Value::u32(64));
    w.set(arch + ".embedding_length", Value::u32(e));
    w.set(arch + ".block_count", Value::u32(1));
    w.set(arch + ".feed_forward_length", Value::u32(ff));
    w.set(arch + ".attention.head_count", Value::u32(2));
    w.set(arch + ".attention.head_count_kv", Value::u32(1));
    w.set(arch + ".rope.freq_base", Value::f32(10000.f));
    w.set(arch + ".rope.scaling.type", Value::str("linear"));
    w.set(arch + ".rope.scaling.factor", Value::f32(2.f));
    w.set(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
    w.set("tokenizer.ggml.model", Value::str("llama"));
    w.set("tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "ab"}));
    w.set("tokenizer.ggml.scores", floats(nv));
    w.set("tokenizer.ggml.token_type", ints({2, 3, 3, 6, 1, 1, 1, 1, 1}));
    auto tensor = [&](const std::string& name, std::vector<int64_t> dims) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> v(static_cast<size_t>(n), 0.01f);
      w.add_tensor(name, dims, gguf::GgmlType::F32, v.data(), v.size() * sizeof(float));
    };
    tensor("token_embd.weight", {e, nv});
    tensor("blk.0.attn_norm.weight", {e});
    tensor("blk.0.attn_q.weight", {e, e});
    tensor("blk.0.attn_k.weight", {e, kv});
    tensor("blk.0.attn_v.weight", {e, kv});
    if (arch == "qwen2") {
      tensor("blk.0.attn_q.bias", {e});
      tensor("blk.0.attn_k.bias", {kv});
      tensor("blk.0.attn_v.bias", {kv});
    }
    tensor("blk.0.attn_output.weight", {e, e});
    tensor("blk.0.ffn_norm.weight", {e});
    tensor("blk.0.ffn_gate.weight", {e, ff});
    tensor("blk.0.ffn_up.weight", {e, ff});
    tensor("blk.0.ffn_down.weight", {ff, e});
    tensor("output_norm.weight", {e});
    tensor("output.weight", {e, nv});
    write_gguf(dir + "/tiny_" + arch + ".gguf", w);
  }
}

void kv_seeds(const std::string& dir) {
  // Layout bytes (fuzz_kv_transfer.cc): layers 1+b0%4, blocks 1+b1%8, cached b2%blocks, block bytes 1+b3%64.
  const std::string layout = {2, 3, 1, 15};  // 3 layers, 4 blocks, 1 cached, 16-byte blocks
  std::vector<uint8_t> kb(32), vb(32);
  for (size_t i = 0; i < kb.size(); ++i) {
    kb[i] = static_cast<uint8_t>(i * 7);
    vb[i] = static_cast<uint8_t>(i / 3);
  }
  for (const char* codec : {"none", "zstd"}) {
    disagg::PrefillResponse res;
    *res.mutable_block() = disagg::encode_blocks("7", 1, 2, {kb.data(), kb.data() + 16}, {vb.data(), vb.data() + 16}, 16, codec, 1);
    write_file(dir + "/block_" + codec + ".bin", layout + res.SerializeAsString());
  }
  {
    disagg::PrefillResponse res;
    disagg::TokenLogprob* t = res.mutable_first()->mutable_token();
    t->set_token(5);
    t->set_logprob(-0.5f);
    disagg::TopLogprob* top = t->add_top();
    top->set_token(5);
    top->set_logprob(-0.5f);
    res.mutable_first()->set_cached_tokens(16);
    write_file(dir + "/first_token.bin", layout + res.SerializeAsString());
  }
  {
    disagg::PrefillRequest req;
    req.set_request_id("9");
    for (int t : {1, 2, 3, 4}) req.add_prompt_tokens(t);
    req.mutable_params()->set_temperature(0.7f);
    req.mutable_params()->set_max_tokens(8);
    req.mutable_params()->add_stop("\n");
    req.mutable_params()->set_grammar("root ::= \"a\"");
    req.set_codec("zstd");
    req.set_zstd_level(3);
    req.set_num_cached_blocks(1);
    write_file(dir + "/prefill_request.bin", layout + req.SerializeAsString());
  }
  {
    disagg::GenerateResponse gr;
    for (int t : {3, 4}) gr.add_tokens(t);
    gr.set_text("hi");
    gr.set_finish_reason("length");
    gr.set_completion_tokens(2);
    write_file(dir + "/generate_response.bin", layout + gr.SerializeAsString());
  }
  {
    // A decode worker's refusal at its --max-cache-salts, and the error details of a prefill
    // worker's (byte 0 = 8: RESOURCE_EXHAUSTED for the details).
    disagg::GenerateResponse gr;
    gr.set_reject_status(429);
    gr.set_reject_code("RateLimited");
    gr.set_error("Too many cache_salt namespaces in use");
    gr.set_finish_reason("error");
    write_file(dir + "/generate_refusal.bin", layout + gr.SerializeAsString());
    const std::string re = {8, 3, 1, 15};
    write_file(dir + "/rate_limited_details.bin", re + disagg::to_grpc(Status::RateLimited("too many salts")).error_details());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  gguf_seeds(root + "/gguf");
  kv_seeds(root + "/kv_transfer");
  return 0;
}
