// Forward pass of the llama family (llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3) over a mixed prefill/decode batch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_scores.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/model.h"
#include "model/moe.h"

namespace pdserve::model {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, gguf::FileMemory memory) {
  auto file = gguf::GgufFile::open(path, memory);
  if (!file.ok()) return file.status();
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = std::move(file.value());
  auto cfg = ModelConfig::from_gguf(*m->file_);
  if (!cfg.ok()) return cfg.status().annotate(path);
  m->config_ = cfg.value();
  if (m->config_.head_dim > kernels::kMaxHeadDim)
    return Status::InvalidArgument(path + ": head dimension " + std::to_string(m->config_.head_dim) + " is above the " +
                         std::to_string(kernels::kMaxHeadDim) + " the attention kernels support");
  if (m->config_.n_vocab == 0) {
    const gguf::TensorInfo* t = m->file_->find_tensor("token_embd.weight");
    if (!t || t->dims.size() != 2) return Status::NotFound(path + ": missing tensor 'token_embd.weight'");
    m->config_.n_vocab = static_cast<int>(t->dims[1]);
  }
  auto w = Weights::bind(*m->file_, m->config_);
  if (!w.ok()) return w.status().annotate(path);
  m->weights_ = w.value();
  m->weights_fingerprint_ = gguf::weights_fingerprint(*m->file_);
  // The private copy can take the kernels' own layout; a mapped file is read-only (and
  // shared), so --mmap keeps ggml's.
  if (m->file_->memory() == gguf::FileMemory::kHugePages && kernels::best_isa() == kernels::Isa::kAvx512Vnni)
    m->relaid_bytes_ = m->weights_.relayout_for_kernels();
  m->set_context_length(m->config_.n_ctx);
  return m;
}

void Model::set_context_length(int n_ctx_per_seq) {
  if (weights_.rope_freqs) rope_factors_ = weights_.rope_freqs;
  else rope_factors_ = n_ctx_per_seq > config_.rope_orig_ctx ? weights_.rope_long : weights_.rope_short;
}

namespace {

void add_bias(float* x, const float* b, int n_tokens, int n) {
  if (!b) return;
  for (int t = 0; t < n_tokens; ++t) kernels::add_inplace(x + static_cast<int64_t>(t) * n, b, n);
}

}  // namespace

const float* Model::forward(const Batch& batch, const std::vector<kernels::KvLayerView>& kv) {
  return forward_first_layers(batch, kv, config_.n_layer);
}

const float* Model::forward_first_layers(const Batch& batch, const std::vector<kernels::KvLayerView>& kv, int n_layers) {
  const ModelConfig& c = config_;
  const int n = batch.n_tokens();
  const int E = c.n_embd, F = c.n_ff, hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
  const int group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // phi3 (llama.cpp llm_build_phi3): Q *= 1/sqrt(hd) after RoPE, then attention scale 1.
  const float attn_scale = c.q_prescale ? 1.0f : scale;
  // RoPE with frequency factors or a magnitude scale takes ggml's order (rope_cache_factors);
  // plain RoPE keeps rope_cache, bit for bit as before.
  const bool rope_ext = rope_factors_ || c.rope_attn_factor != 1.0f;
  // Per-token matmul reduction order (see Batch::gemm_order); nullptr = decode order.
  const uint8_t* order = batch.gemm_order.size() == static_cast<size_t>(n) ? batch.gemm_order.data() : nullptr;

  const int n_out = static_cast<int>(batch.logits_rows.size());
  ws_.fit(c, n, n_out);
  float *x = ws_.x.get(), *xn = ws_.xn.get(), *xo = ws_.xo.get(), *q = ws_.q.get(), *k = ws_.k.get(),
        *v = ws_.v.get(), *attn = ws_.attn.get(), *proj = ws_.proj.get(), *gate = ws_.gate.get(), *up = ws_.up.get();
  OpTimer prof(profile_);  // --profile: per-op time (op_profile.h); a no-op when off

  // The residual step between blocks on m rows of xs (kernels::residual_rms_norm): xs +=
  // post-normed proj (when add), then out = rms_norm(xs) · w (when out), in one parallel
  // loop over groups of eight rows: a range of fewer rows would run each row's 2,048
  // dependent double adds alone (Q4_K_M B=32: 32 rows in 16 ranges of 2 took 47 µs a norm).
  auto residual = [&](float* xs, int m, bool add, const float* post_w, float* out, const float* w, Op op) {
    kernels::parallel_for(
        (m + 7) / 8,
        [&](int64_t g0, int64_t g1) {
          const int r0 = static_cast<int>(g0) * 8, r1 = std::min(m, static_cast<int>(g1) * 8);
          const size_t off = size_t(r0) * E;
          kernels::residual_rms_norm(&xs[off], add ? &proj[off] : nullptr, post_w, out ? &out[off] : nullptr, w, r1 - r0, E,
                                     c.rms_eps);
        },
        kernels::worth_parallel(int64_t{m} * E), /*grain=*/1);
    prof.mark(op);
  };

  // FFN block on m rows whose normed input is in xn: proj = W_down · (silu(W_gate·xn) ⊙
  // W_up·xn) (the caller adds it to the residual stream).
  auto ffn = [&](const LayerWeights& L, int m, const uint8_t* ord) {
    if (c.n_expert > 0) {  // mixture of experts (model/moe.h): router, experts, weighted sum into proj
      moe_ffn(c, L, xn, m, ws_, proj);  // decode order throughout (moe.h)
      prof.mark(Op::kGateUp);
      return;
    }
    const kernels::MatmulJob gate_up[] = {{&L.w_gate, gate}, {&L.w_up, up}};
    kernels::matmul_multi(gate_up, 2, xn, m, ord);
    prof.mark(Op::kGateUp);
    kernels::parallel_for(
        m,
        [&](int64_t t0, int64_t t1) {
          for (int t = static_cast<int>(t0); t < t1; ++t) {
            if (c.geglu) kernels::geglu(&gate[size_t(t) * F], &up[size_t(t) * F], F);
            else kernels::swiglu(&gate[size_t(t) * F], &up[size_t(t) * F], F);
          }
        },
        kernels::worth_parallel(int64_t{m} * F * 8));
    prof.mark(Op::kSwiglu);
    kernels::matmul(L.w_down, gate, m, proj, ord);
    prof.mark(Op::kDown);
  };

  kernels::parallel_for(
      n,
      [&](int64_t t0, int64_t t1) {
        for (int t = static_cast<int>(t0); t < t1; ++t) {
          float* xt = x + static_cast<size_t>(t) * E;
          kernels::dequantize_row(weights_.tok_embd, batch.tokens[t], xt);
          if (c.embd_scale)  // gemma: ggml_scale(inpL, sqrtf(n_embd))
            for (int i = 0; i < E; ++i) xt[i] *= std::sqrt(static_cast<float>(E));
        }
      },
      kernels::worth_parallel(int64_t{n} * E));
  prof.mark(Op::kEmbed);

  // RoPE's cos/sin of every token's position, made once per pass for each kind of layer
  // that runs (rope_base_of / rope_freq_scale_of: Gemma 3's sliding-window layers have
  // their own), not once per layer (a B=32 step spent 0.5 ms in sin and cos).
  float* rope_cs = ws_.rope_cs.get();
  int first_of_kind[2] = {-1, -1};  // a layer of each kind (0: rope_base, 1: sliding window)
  for (int l = n_layers - 1; l >= 0; --l) first_of_kind[c.is_swa_layer(l) ? 1 : 0] = l;
  kernels::parallel_for(
      n,
      [&](int64_t t0, int64_t t1) {
        for (int kind = 0; kind < 2; ++kind) {
          const int l = first_of_kind[kind];
          if (l < 0) continue;
          for (int t = static_cast<int>(t0); t < t1; ++t) {
            float* cs = &rope_cs[(size_t(kind) * n + t) * hd];
            if (rope_ext)
              kernels::rope_cache_factors(c.rope_dim, batch.positions[t], c.rope_base_of(l), c.rope_freq_scale_of(l), rope_factors_,
                                          c.rope_attn_factor, cs);
            else
              kernels::rope_cache(c.rope_dim, batch.positions[t], c.rope_base_of(l), c.rope_freq_scale_of(l), cs);
          }
        }
      },
      kernels::worth_parallel(int64_t{n} * c.rope_dim * 32));
  prof.mark(Op::kRope);

  int64_t attn_work = 0;  // multiply-adds of Q·K and P·V over the batch
  for (int t = 0; t < n; ++t) attn_work += 2 * int64_t{batch.keys_of(t)} * nq;
  const bool want_mass = !batch.attn_mass.empty();
  // Attention tasks: the smallest split of each GQA group into parts that gives every thread
  // the same number of tasks, or at least 4 tasks per thread.
  const int attn_threads = kernels::worth_parallel(attn_work) ? kernels::compute_threads() : 1;
  int attn_parts = 1;
  for (int64_t tasks = int64_t{n} * c.n_head_kv; attn_parts < group; ++attn_parts, tasks += int64_t{n} * c.n_head_kv)
    if (tasks % attn_threads == 0 || tasks >= 4 * attn_threads) break;

  if (n_layers > 0) residual(x, n, false, nullptr, xn, weights_.layers[0].attn_norm, Op::kAttnNorm);
  for (int l = 0; l < n_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    const kernels::KvLayerView& cache = kv[l];
    const bool last = l + 1 == n_layers;

    // Attention block: x += Wo · attn(RoPE(Wq·xn), RoPE(Wk·xn), Wv·xn), xn = n(x) (the
    // previous residual step normed x).
    const kernels::MatmulJob qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
    kernels::matmul_multi(qkv, 3, xn, n, order);
    prof.mark(Op::kQkv);
    add_bias(q, L.bq, n, nq);
    add_bias(k, L.bk, n, nkv);
    add_bias(v, L.bv, n, nkv);
    prof.mark(Op::kOther);
    kernels::parallel_for(
        n,
        [&](int64_t t0, int64_t t1) {
          for (int t = static_cast<int>(t0); t < t1; ++t) {
            const float* cs = &rope_cs[(size_t(c.is_swa_layer(l) ? 1 : 0) * n + t) * hd];  // rope_dim <= head_dim, checked at load
            if (c.qk_norm) {  // qwen3, gemma3: RMSNorm over each head (llama.cpp build_norm on [hd, heads, tokens])
              for (int h = 0; h < c.n_head; ++h) {
                float* qh = &q[size_t(t) * nq + h * hd];
                kernels::rms_norm(qh, qh, L.q_norm, hd, c.rms_eps);
              }
              for (int h = 0; h < c.n_head_kv; ++h) {
                float* kh = &k[size_t(t) * nkv + h * hd];
                kernels::rms_norm(kh, kh, L.k_norm, hd, c.rms_eps);
              }
            }
            for (int h = 0; h < c.n_head; ++h) kernels::rope_apply(&q[size_t(t) * nq + h * hd], c.rope_dim, cs, c.rope_neox);
            for (int h = 0; h < c.n_head_kv; ++h) kernels::rope_apply(&k[size_t(t) * nkv + h * hd], c.rope_dim, cs, c.rope_neox);
            if (c.q_prescale)
              for (int i = 0; i < nq; ++i) q[size_t(t) * nq + i] *= c.q_scale;
            kernels::kv_store(cache, batch.slot_mapping[t], &k[size_t(t) * nkv], &v[size_t(t) * nkv]);
          }
        },
        kernels::worth_parallel(int64_t{n} * (nq + nkv) * 4));
    prof.mark(Op::kRope);
    if (batch.after_layer) batch.after_layer(l);
    // One task per (token, KV head, part): the query heads of a KV head (GQA group) in one
    // call, so each K/V row is read and converted once for all of them; the group is split
    // into parts only when there are too few tasks to share evenly among the threads (e.g.
    // one decode token with a single KV head). Bit-identical whatever the split.
    // A sliding-window layer: the query at position p sees keys p − window + 1 .. p
    // (llama.cpp LLAMA_SWA_TYPE_STANDARD masks p − key >= window), i.e. the last `window`
    // of its keys_of(t) keys.
    const bool swa = c.is_swa_layer(l);
    const int64_t attn_tasks = int64_t{n} * c.n_head_kv * attn_parts;  // (token, KV head, part)
    kernels::parallel_for(
        attn_tasks,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const int t = static_cast<int>(i / (int64_t{c.n_head_kv} * attn_parts));
            const int g = static_cast<int>(i / attn_parts % c.n_head_kv), part = static_cast<int>(i % attn_parts);
            const int h0 = g * group + part * group / attn_parts, h1 = g * group + (part + 1) * group / attn_parts;
            const int first_key = swa ? std::max(0, batch.keys_of(t) - c.sliding_window) : 0;
            kernels::paged_attention_group(&q[size_t(t) * nq + h0 * hd], h1 - h0, cache, g,
                                           batch.block_tables[batch.seq_ids[t]], batch.keys_of(t), attn_scale,
                                           &attn[size_t(t) * nq + h0 * hd], kernels::Isa::kAuto, first_key, c.attn_softcap);
          }
        },
        attn_threads > 1, /*grain=*/1);
    if (want_mass) {
      // H2O attention mass: a second pass over K (kernels/attention_scores.h), one task per
      // token so each row gets its heads' probabilities in a fixed order.
      kernels::parallel_for(
          n,
          [&](int64_t t0, int64_t t1) {
            for (int t = static_cast<int>(t0); t < t1; ++t) {
              float* mass = batch.attn_mass[t];
              if (!mass) continue;
              for (int g = 0; g < c.n_head_kv; ++g)
                kernels::attention_mass_group(&q[size_t(t) * nq + g * group * hd], group, cache, g,
                                              batch.block_tables[batch.seq_ids[t]], batch.keys_of(t), attn_scale, mass);
            }
          },
          attn_threads > 1, /*grain=*/1);
    }
    prof.mark(Op::kAttention);
    kernels::matmul(L.wo, attn, n, proj, order);
    prof.mark(Op::kWo);

    if (!last) {
      // FFN block: x += FFN(n(x)), then the next layer's attention norm.
      residual(x, n, true, L.attn_post_norm, xn, L.ffn_norm, Op::kFfnNorm);
      ffn(L, n, order);
      residual(x, n, true, L.ffn_post_norm, xn, weights_.layers[l + 1].attn_norm, Op::kAttnNorm);
    } else {
      // Last layer: only the logits rows still matter (the K/V of every layer is already
      // stored), so, like llama.cpp (ggml_get_rows on inp_out_ids before the last FFN),
      // run the FFN on those rows alone. The reference computes them as a batch of its
      // output tokens — one token for a prompt — so they take the decode order.
      residual(x, n, true, L.attn_post_norm, nullptr, nullptr, Op::kFfnNorm);
      for (int i = 0; i < n_out; ++i)
        std::copy_n(&x[size_t(batch.logits_rows[i]) * E], E, &xo[size_t(i) * E]);
      if (n_out > 0) {
        residual(xo, n_out, false, nullptr, xn, L.ffn_norm, Op::kFfnNorm);
        ffn(L, n_out, nullptr);
        residual(xo, n_out, true, L.ffn_post_norm, ws_.h.get(), weights_.output_norm, Op::kOutputNorm);
      }
    }
  }

  float* logits = ws_.logits.get();
  if (n_out == 0) return logits;
  const float* h = ws_.h.get();  // rms_norm(xo) · output_norm, by the last residual step
  kernels::matmul(weights_.output, h, n_out, logits, nullptr);  // one output row per prompt: decode order
  if (c.final_softcap > 0.f) kernels::softcap_inplace(logits, n_out * c.n_vocab, c.final_softcap);
  prof.mark(Op::kOutput);
  return logits;
}

}  // namespace pdserve::model
