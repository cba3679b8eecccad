#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace pdserve::engine {

namespace {

int32_t argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

/// Uniform double in [0, 1) from 53 random bits (portable, unlike std distributions).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

int32_t sample_token(const float* logits, int n_vocab, const SamplingParams& p, std::mt19937_64& rng,
                     const uint32_t* allowed) {
  std::vector<int32_t> ids;
  if (allowed && p.temperature <= 0.f) {  // argmax over the allowed ids, lowest id on ties
    int32_t best = -1;
    for (int w = 0; w < (n_vocab + 31) / 32; ++w)
      for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) {
        const int id = w * 32 + __builtin_ctz(bits);
        if (id < n_vocab && (best < 0 || logits[id] > logits[best])) best = id;
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
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int k = n_vocab;
  if (p.top_k > 0 && p.top_k < n_vocab) {
    k = p.top_k;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    ids.resize(k);
  } else {
    std::sort(ids.begin(), ids.end(), better);
  }
  // Softmax at temperature over the kept candidates (sorted best first).
  std::vector<double> probs(k);
  const double mx = logits[ids[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) sum += probs[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
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
  for (int i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
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

}  // namespace pdserve::engine
