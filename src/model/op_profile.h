// Per-op wall time of Model::forward (`pdserve bench-model --profile`, issue #21): where a
// decode step or a prefill spends its time. Off unless Model::set_profile is given a
// profile; then forward() reads the clock between its ops (a few hundred reads per pass).
#pragma once

#include <cstdint>

namespace pdserve::model {

/// The ops of a llama forward pass as the profile reports them. The GEMV/GEMM rows are per
/// weight kind (Q/K/V and gate/up run fused, one row each) and hold the row loops' busy
/// time averaged over their threads; kActQuant is the activations' quantisation/packing
/// before them, kForkJoin the rest of their wall time (fork/join and waiting for the
/// slowest thread).
enum class Op : int {
  kEmbed,       // token embedding rows
  kAttnNorm,    // the previous FFN's residual add + RMSNorm before attention
  kQkv,         // GEMV/GEMM attn_q+attn_k+attn_v
  kRope,        // RoPE's cos/sin tables, RoPE on q and k, K/V written to the cache
  kAttention,   // paged attention (and h2o mass), its own fork/join included
  kWo,          // GEMV/GEMM attn_output
  kFfnNorm,     // attention's residual add + RMSNorm before the FFN
  kGateUp,      // GEMV/GEMM ffn_gate+ffn_up
  kSwiglu,      // silu(gate) * up
  kDown,        // GEMV/GEMM ffn_down
  kOutputNorm,  // the last FFN's residual add + final RMSNorm
  kOutput,      // GEMV/GEMM of the output head (logits)
  kActQuant,    // activation quantisation / rounding / packing of every GEMV/GEMM
  kForkJoin,    // GEMV/GEMM wall time beyond busy rows and prep: fork/join, imbalance
  kOther,       // biases, copies
  kCount
};

/// Short name of an op for the profile table ("qkv", "fork/join wait", ...).
const char* op_name(Op op);

/// Accumulated per-op time over `forwards` forward passes, nanoseconds.
struct OpProfile {
  int64_t ns[static_cast<int>(Op::kCount)] = {};
  int64_t total_ns = 0;  // wall time of the passes
  int64_t forwards = 0;
  void clear() { *this = OpProfile{}; }
};

/// Stopwatch of one forward pass: mark(op) charges the time since the previous mark (or
/// construction) to `op`, splitting a GEMV/GEMM's time into busy rows / activation prep /
/// fork-join wait with kernels::matmul_profile_take(). Does nothing when the profile is null.
class OpTimer {
 public:
  explicit OpTimer(OpProfile* p) : p_(p) {
    if (p_) start();
  }
  ~OpTimer() {
    if (p_) finish();
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  void mark(Op op) {
    if (p_) charge(op);
  }

 private:
  void start();
  void charge(Op op);
  void finish();
  OpProfile* p_;
  int64_t begin_ = 0, last_ = 0;
};

}  // namespace pdserve::model
