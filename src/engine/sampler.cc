#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernels/ops.h"

namespace pdserve::engine {

namespace {

/// Uniform double in [0, 1) from 53 random bits (portable, unlike std distributions).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// A 64-bit key that sorts ascending as (logit descending, id ascending), so the sort
/// compares integers instead of loading two logits per comparison (-0 counts as +0).
uint64_t rank_key(float logit, int32_t id) {
  uint32_t u;
  logit = logit == 0.f ? 0.f : logit;
  std::memcpy(&u, &logit, 4);
  const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

/// Sorts `ids` by (logits descending, id ascending), keeping the first `k` (partial for k < n).
void sort_candidates(std::vector<int32_t>& ids, const float* logits, int k) {
  thread_local std::vector<uint64_t> keys;  // reused: a vocabulary's worth is ~400 KB
  keys.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) keys[i] = rank_key(logits[ids[i]], ids[i]);
  if (k < static_cast<int>(keys.size())) std::partial_sort(keys.begin(), keys.begin() + k, keys.end());
  else std::sort(keys.begin(), keys.end());
  ids.resize(k);
  for (int i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
}

}  // namespace

int32_t argmax(const float* logits, int n) {
  if (n <= 0) return 0;
  // Pass 1: the largest value, in 16 independent lanes (a loop the compiler vectorises; a
  // single running "best" makes every element wait on the last compare). NaNs never win.
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float& m : lane) m = -std::numeric_limits<float>::infinity();
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = logits[i + l] > lane[l] ? logits[i + l] : lane[l];
  float mx = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  for (float m : lane) mx = m > mx ? m : mx;
  // Pass 2: its first occurrence (the lowest id on ties).
  for (int j = 0; j < n; ++j)
    if (logits[j] == mx) return j;
  return 0;  // every logit NaN
}

int32_t sample_token(const float* logits, int n_vocab, const SamplingParams& p, std::mt19937_64& rng,
                     const uint32_t* allowed) {
  // Reused per thread: vocabulary-sized buffers, allocated fresh, would be mmap'd and
  // page-faulted on every call.
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> probs;
  ids.clear();
  if (allowed && p.temperature <= 0.f) {  // argmax over the allowed ids, lowest id on ties
    int32_t best = -1;
    float bv = 0.f;
    for (int w = 0; w < (n_vocab + 31) / 32; ++w)
      for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) {
        const int id = w * 32 + __builtin_ctz(bits);
        if (id < n_vocab && (best < 0 || logits[id] > bv)) {
          best = id;
          bv = logits[id];
        }
      }
    return best;
  }
  if (allowed) {
    for (int w = 0; w < (n_vocab + 31) / 32; ++w)
      for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) {
        const int id = w * 32 + __builtin_ctz(bits);
        if (id < n_vocab) ids.push_back(id);
      }
    if (ids.empty()) return -1;
    n_vocab = static_cast<int>(ids.size());  // from here on: the number of candidates
  } else {
    if (p.temperature <= 0.f) return argmax(logits, n_vocab);
    ids.resize(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
  }
  int k = p.top_k > 0 && p.top_k < n_vocab ? p.top_k : n_vocab;
  // The candidates best first (logit descending, id ascending) when top_k or top_p must
  // cut them; else in id order, which draws from the same distribution without a sort
  // of the whole vocabulary (6.5 ms for 50,257 ids).
  const bool sorted = k < n_vocab || p.top_p < 1.f;
  if (sorted) sort_candidates(ids, logits, k);
  float mxf = logits[ids[0]];
  if (!sorted)
    for (int i = 1; i < k; ++i) mxf = logits[ids[i]] > mxf ? logits[ids[i]] : mxf;
  // Softmax at temperature over the kept candidates, in double: a subnormal temperature
  // (1e-39) stays finite there (its float reciprocal is inf, and 0 · inf is NaN).
  probs.resize(k);
  const double mx = mxf;
  double sum = 0.0;
  for (int i = 0; i < k; ++i) sum += probs[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
  if (p.min_p > 0.f) {  // the most likely candidate's weight is exp(0) = 1
    const double floor = p.min_p;
    sum = 0.0;
    if (sorted) {  // a prefix survives: cut k there
      int m = 1;
      while (m < k && probs[m] >= floor) ++m;
      k = m;
      for (int i = 0; i < k; ++i) sum += probs[i];
    } else {
      for (int i = 0; i < k; ++i) sum += probs[i] = probs[i] >= floor ? probs[i] : 0.0;
    }
  }
  int keep = k;
  if (p.top_p < 1.f) {
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      cum += probs[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0.0;
  for (int i = 0; i < keep; ++i) total += probs[i];
  double r = uniform01(rng) * total;
  int last = 0;  // the last candidate with a weight (rounding may leave r ≥ 0 at the end)
  for (int i = 0; i < keep; ++i) {
    if (probs[i] == 0.0) continue;
    last = i;
    r -= probs[i];
    if (r < 0) return ids[i];
  }
  return ids[last];
}

TokenLogprob token_logprobs(const float* logits, int n_vocab, int32_t token, int n) {
  std::vector<float> lp(n_vocab);
  kernels::log_softmax(logits, lp.data(), n_vocab);
  TokenLogprob out;
  out.token = token;
  out.logprob = lp[token];
  if (n > 0) {
    std::vector<int32_t> ids(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    n = std::min(n, n_vocab);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                      [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
    for (int i = 0; i < n; ++i) out.top.emplace_back(ids[i], lp[ids[i]]);
  }
  return out;
}

void adjust_logits(const float* logits, int n_vocab, const SamplingParams& p, const int32_t* tokens, size_t n_tokens,
                   size_t first_generated, float* out) {
  std::memcpy(out, logits, static_cast<size_t>(n_vocab) * sizeof(float));
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < n_vocab) out[id] += bias;
  // Per-id counts over a range of tokens, O(range) (no sort of a long prompt per token): the
  // ids touched are listed, and their counts set back to zero after use.
  thread_local std::vector<int32_t> count;
  thread_local std::vector<int32_t> touched;
  if (count.size() < static_cast<size_t>(n_vocab)) count.assign(static_cast<size_t>(n_vocab), 0);
  const auto tally = [&](size_t from) {
    touched.clear();
    for (size_t i = from; i < n_tokens; ++i) {
      const int32_t id = tokens[i];
      if (id >= 0 && id < n_vocab && count[id]++ == 0) touched.push_back(id);
    }
  };
  if (p.repetition_penalty != 1.0f) {
    const size_t n = static_cast<size_t>(p.repetition_last_n);
    tally(p.repetition_last_n > 0 && n < n_tokens ? n_tokens - n : 0);
    for (const int32_t id : touched) {
      out[id] = out[id] > 0.0f ? out[id] / p.repetition_penalty : out[id] * p.repetition_penalty;
      count[id] = 0;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    tally(std::min(first_generated, n_tokens));
    for (const int32_t id : touched) {
      out[id] -= static_cast<float>(count[id]) * p.frequency_penalty + p.presence_penalty;
      count[id] = 0;
    }
  }
}

void ban_stop_tokens(float* logits, int n_vocab, const SamplingParams& p, const std::vector<int32_t>& eog_ids) {
  const auto ban = [&](int32_t id) {
    if (id >= 0 && id < n_vocab) logits[id] = -std::numeric_limits<float>::infinity();
  };
  if (!p.ignore_eos)
    for (int32_t id : eog_ids) ban(id);
  for (int32_t id : p.stop_token_ids) ban(id);
}

}  // namespace pdserve::engine
