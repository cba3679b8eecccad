#include "model/weights.h"

#include <string>
#include <vector>

#include "kernels/weight_layout.h"

namespace pdserve::model {

namespace {

std::string shape_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

class Binder {
 public:
  explicit Binder(const gguf::GgufFile& f) : f_(f) {}
  Status status;

  /// A 2-D matrix with dims [cols, rows] (ggml order).
  kernels::WeightView matrix(const std::string& name, int64_t cols, int64_t rows, bool optional = false) {
    kernels::WeightView w;
    if (!status.ok()) return w;
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!optional) status = Status::NotFound("missing tensor '" + name + "'");
      return w;
    }
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      status = Status::InvalidArgument("tensor '" + name + "' has shape " + shape_str(t->dims) + ", expected " + shape_str({cols, rows}));
      return w;
    }
    if (!kernels::matmul_supports(t->type)) {
      status = Status::InvalidArgument("tensor '" + name + "' has type " + gguf::type_name(t->type) + ", not supported yet");
      return w;
    }
    w.data = t->data;
    w.type = t->type;
    w.cols = cols;
    w.rows = rows;
    w.row_bytes = gguf::row_bytes(t->type, cols);
    return w;
  }

  /// A 3-D stack of `n` matrices with dims [cols, rows, n] (MoE experts), bound as one
  /// matrix of n · rows rows (see expert_slice).
  kernels::WeightView experts(const std::string& name, int64_t cols, int64_t rows, int64_t n) {
    kernels::WeightView w;
    if (!status.ok()) return w;
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      status = Status::NotFound("missing tensor '" + name + "'");
      return w;
    }
    if (t->dims.size() != 3 || t->dims[0] != cols || t->dims[1] != rows || t->dims[2] != n) {
      status = Status::InvalidArgument("tensor '" + name + "' has shape " + shape_str(t->dims) + ", expected " + shape_str({cols, rows, n}));
      return w;
    }
    if (!kernels::matmul_supports(t->type)) {
      status = Status::InvalidArgument("tensor '" + name + "' has type " + gguf::type_name(t->type) + ", not supported yet");
      return w;
    }
    w.data = t->data;
    w.type = t->type;
    w.cols = cols;
    w.rows = rows * n;
    w.row_bytes = gguf::row_bytes(t->type, cols);
    return w;
  }

  /// Rows [first, first + n) of a bound matrix `w` (a fused tensor's part).
  static kernels::WeightView rows_of(const kernels::WeightView& w, int64_t first, int64_t n) {
    kernels::WeightView v = w;
    if (!w.data) return v;
    v.data = static_cast<const uint8_t*>(w.data) + first * w.row_bytes;
    v.rows = n;
    return v;
  }

  /// A float32 vector of `n` values.
  const float* vec(const std::string& name, int64_t n, bool optional = false) {
    if (!status.ok()) return nullptr;
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!optional) status = Status::NotFound("missing tensor '" + name + "'");
      return nullptr;
    }
    if (t->n_elements() != n) {
      status = Status::InvalidArgument("tensor '" + name + "' has shape " + shape_str(t->dims) + ", expected [" + std::to_string(n) + "]");
      return nullptr;
    }
    if (t->type != gguf::GgmlType::F32) {
      status = Status::InvalidArgument("tensor '" + name + "' has type " + gguf::type_name(t->type) + ", expected F32");
      return nullptr;
    }
    return reinterpret_cast<const float*>(t->data);
  }

 private:
  const gguf::GgufFile& f_;
};

}  // namespace

Result<Weights> Weights::bind(const gguf::GgufFile& f, const ModelConfig& c) {
  Binder b(f);
  Weights w;
  const int64_t e = c.n_embd, q = int64_t{c.n_head} * c.head_dim, kv = int64_t{c.n_head_kv} * c.head_dim;
  w.tok_embd = b.matrix("token_embd.weight", e, c.n_vocab);
  for (int l = 0; l < c.n_layer && b.status.ok(); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn_norm = b.vec(p + "attn_norm.weight", e);
    if (c.arch == "phi3" && f.find_tensor(p + "attn_qkv.weight")) {  // optional in llama.cpp too
      const kernels::WeightView qkv = b.matrix(p + "attn_qkv.weight", e, q + 2 * kv);
      L.wq = Binder::rows_of(qkv, 0, q);
      L.wk = Binder::rows_of(qkv, q, kv);
      L.wv = Binder::rows_of(qkv, q + kv, kv);
    } else {
      L.wq = b.matrix(p + "attn_q.weight", e, q);
      L.wk = b.matrix(p + "attn_k.weight", e, kv);
      L.wv = b.matrix(p + "attn_v.weight", e, kv);
    }
    L.wo = b.matrix(p + "attn_output.weight", q, e);
    const bool bias = c.arch == "qwen2";
    L.bq = b.vec(p + "attn_q.bias", q, !bias);
    L.bk = b.vec(p + "attn_k.bias", kv, !bias);
    L.bv = b.vec(p + "attn_v.bias", kv, !bias);
    if (c.qk_norm) {
      L.q_norm = b.vec(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = b.vec(p + "attn_k_norm.weight", c.head_dim);
    }
    L.ffn_norm = b.vec(p + "ffn_norm.weight", e);
    if (c.post_norms) {
      L.attn_post_norm = b.vec(p + "post_attention_norm.weight", e);
      L.ffn_post_norm = b.vec(p + "post_ffw_norm.weight", e);
    }
    if (c.n_expert > 0) {
      L.ffn_gate_inp = b.matrix(p + "ffn_gate_inp.weight", e, c.n_expert);
      L.w_gate_exps = b.experts(p + "ffn_gate_exps.weight", e, c.n_ff_exp, c.n_expert);
      L.w_up_exps = b.experts(p + "ffn_up_exps.weight", e, c.n_ff_exp, c.n_expert);
      L.w_down_exps = b.experts(p + "ffn_down_exps.weight", c.n_ff_exp, e, c.n_expert);
      w.layers.push_back(L);
      continue;
    }
    if (c.arch == "phi3") {
      const kernels::WeightView up = b.matrix(p + "ffn_up.weight", e, 2 * int64_t{c.n_ff});
      L.w_gate = Binder::rows_of(up, 0, c.n_ff);
      L.w_up = Binder::rows_of(up, c.n_ff, c.n_ff);
    } else {
      L.w_gate = b.matrix(p + "ffn_gate.weight", e, c.n_ff);
      L.w_up = b.matrix(p + "ffn_up.weight", e, c.n_ff);
    }
    L.w_down = b.matrix(p + "ffn_down.weight", c.n_ff, e);
    w.layers.push_back(L);
  }
  w.output_norm = b.vec("output_norm.weight", e);
  w.rope_freqs = b.vec("rope_freqs.weight", c.rope_dim / 2, /*optional=*/true);
  if (c.arch == "phi3") {
    w.rope_long = b.vec("rope_factors_long.weight", c.rope_dim / 2, /*optional=*/true);
    w.rope_short = b.vec("rope_factors_short.weight", c.rope_dim / 2, /*optional=*/true);
  }
  w.output = b.matrix("output.weight", e, c.n_vocab, /*optional=*/true);
  if (b.status.ok() && !w.output.data) w.output = w.tok_embd;  // tied embeddings
  if (!b.status.ok()) return b.status;
  return w;
}

int64_t Weights::relayout_for_kernels() {
  // Every matrix of the layers and an untied output head (not the embedding table, which is
  // read row by row). No two views share bytes: phi3's split views are disjoint row ranges,
  // and the GGUF reader refuses overlapping tensors.
  std::vector<kernels::WeightView*> views;
  for (LayerWeights& L : layers)
    for (kernels::WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) views.push_back(v);
  if (output.data != tok_embd.data) views.push_back(&output);
  int64_t bytes = 0;
  for (kernels::WeightView* v : views)
    if (v->data && kernels::can_tile16(*v)) {
      kernels::tile16_in_place(*v);
      bytes += v->rows * v->row_bytes;
    }
  return bytes;
}

}  // namespace pdserve::model
