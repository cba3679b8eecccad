#include "engine/spec_model.h"

#include <algorithm>

#include "engine/sampler.h"
#include "engine/sequence.h"
#include "kernels/matmul.h"
#include "model/model.h"

namespace pdserve::engine {

namespace {

/// Appends row (token, pos) of sequence `seq_index` of `s` to `b` (slot via `table`).
void add_row(model::Batch& b, const kv::BlockTable& table, int block_size, int seq_index, int32_t token, int pos,
             int role_prompt_len, bool logits) {
  if (logits) b.logits_rows.push_back(b.n_tokens());
  b.tokens.push_back(token);
  b.positions.push_back(pos);
  b.slot_mapping.push_back(table.slot(pos, block_size));
  b.seq_ids.push_back(seq_index);
  b.gemm_order.push_back(kernels::gemm_order_flag(pos, role_prompt_len));
}

}  // namespace

void LayerSkipProposer::propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
                                std::vector<std::vector<int32_t>>& out) {
  out.assign(seqs.size(), {});
  const int n_vocab = target_.config().n_vocab, bs = kv_.block_size();
  const int steps = seqs.empty() ? 0 : *std::max_element(max_k.begin(), max_k.end());
  for (int step = 0; step < steps; ++step) {
    model::Batch b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step >= max_k[i]) continue;
      const Sequence& s = *seqs[i];
      b.block_tables.push_back(s.kv.block_table.blocks.data());
      const int32_t tok = step == 0 ? s.tokens.back() : out[i].back();
      add_row(b, s.kv.block_table, bs, static_cast<int>(who.size()), tok, s.num_computed + step, s.role_prompt_len, true);
      who.push_back(i);
    }
    const float* logits = target_.forward_first_layers(b, kv_.layers(), layers_);
    for (size_t r = 0; r < who.size(); ++r) out[who[r]].push_back(argmax(logits + r * n_vocab, n_vocab));
  }
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<model::Model> draft, int block_size, int32_t num_blocks)
    : draft_(std::move(draft)) {
  const model::ModelConfig& c = draft_->config();
  kv::KvCacheShape shape;
  shape.n_layers = c.n_layer;
  shape.n_kv_heads = c.n_head_kv;
  shape.head_dim = c.head_dim;
  shape.block_size = block_size;
  shape.num_blocks = num_blocks;
  shape.dtype = kernels::KvDtype::F16;
  kv_ = std::make_unique<kv::KvCacheManager>(shape, /*prefix_caching=*/false, kv::EvictionPolicy::kLru);
}

DraftModelProposer::~DraftModelProposer() {
  for (auto& [key, st] : states_) kv_->free(st.kv);
}

void DraftModelProposer::release(int64_t seq_id, int choice_index) {
  auto it = states_.find({seq_id, choice_index});
  if (it == states_.end()) return;
  kv_->free(it->second.kv);
  states_.erase(it);
}

void DraftModelProposer::propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
                                 std::vector<std::vector<int32_t>>& out) {
  out.assign(seqs.size(), {});
  const int n_vocab = draft_->config().n_vocab, bs = kv_->block_size();
  // Slots for each sequence's catch-up and drafts; a sequence the pool cannot hold drafts nothing.
  std::vector<State*> st(seqs.size(), nullptr);
  std::vector<int> from(seqs.size(), 0);  // first position to (re)compute
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = *seqs[i];
    State& x = states_[{s.id, s.choice_index}];
    const int last = static_cast<int>(s.tokens.size()) - 1;  // the row that drafts the first token
    const auto common = std::mismatch(x.computed.begin(), x.computed.end(), s.tokens.begin(), s.tokens.begin() + last);
    x.computed.resize(common.first - x.computed.begin());
    if (!kv_->allocate_slots(x.kv, last + max_k[i])) {
      release(s.id, s.choice_index);
      continue;
    }
    st[i] = &x;
    from[i] = static_cast<int>(x.computed.size());
  }
  const int steps = seqs.empty() ? 0 : *std::max_element(max_k.begin(), max_k.end());
  for (int step = 0; step < steps; ++step) {
    model::Batch b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (!st[i] || step >= max_k[i]) continue;
      const Sequence& s = *seqs[i];
      State& x = *st[i];
      const int seq_index = static_cast<int>(b.block_tables.size());
      b.block_tables.push_back(x.kv.block_table.blocks.data());
      const int last = static_cast<int>(s.tokens.size()) - 1;
      if (step == 0) {  // catch up on positions [from, last), then the last token
        for (int p = from[i]; p < last; ++p) add_row(b, x.kv.block_table, bs, seq_index, s.tokens[p], p, s.role_prompt_len, false);
        x.computed.assign(s.tokens.begin(), s.tokens.begin() + last);
      }
      const int32_t tok = step == 0 ? s.tokens.back() : out[i].back();
      add_row(b, x.kv.block_table, bs, seq_index, tok, last + step, s.role_prompt_len, true);
      // The drafted tokens' K/V are kept: if accepted, the next call need not recompute them.
      x.computed.push_back(tok);
      who.push_back(i);
    }
    const float* logits = draft_->forward(b, kv_->layers());
    for (size_t r = 0; r < who.size(); ++r) out[who[r]].push_back(argmax(logits + r * n_vocab, n_vocab));
  }
}

}  // namespace pdserve::engine
