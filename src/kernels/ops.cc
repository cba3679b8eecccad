#include "kernels/ops.h"

#include <cmath>

namespace pdserve::kernels {

void rms_norm(float* out, const float* x, const float* w, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void rope(float* x, int head_dim, int rot_dim, int pos, float base, float freq_scale, bool neox) {
  // theta_i = pos * base^(-2i/rot_dim), computed by repeated multiplication as ggml does.
  const int half = rot_dim / 2;
  const float theta_scale = std::pow(base, -2.0f / rot_dim);
  float theta = static_cast<float>(pos) * freq_scale;
  for (int i = 0; i < half; ++i, theta *= theta_scale) {
    const float c = std::cos(theta), s = std::sin(theta);
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

void swiglu(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* out, const float* x, int n) {
  for (int i = 0; i < n; ++i) out[i] += x[i];
}

void log_softmax(const float* logits, float* out, int n) {
  float mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - lse);
}

}  // namespace pdserve::kernels
