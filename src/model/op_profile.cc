#include "model/op_profile.h"

#include "kernels/matmul_profile.h"
#include "model/model.h"

namespace pdserve::model {

const char* op_name(Op op) {
  switch (op) {
    case Op::kEmbed: return "embedding";
    case Op::kAttnNorm: return "residual + attn norm";
    case Op::kQkv: return "GEMV/GEMM q+k+v";
    case Op::kRope: return "RoPE + KV store";
    case Op::kAttention: return "attention";
    case Op::kWo: return "GEMV/GEMM attn_output";
    case Op::kFfnNorm: return "residual + ffn norm";
    case Op::kGateUp: return "GEMV/GEMM gate+up";
    case Op::kSwiglu: return "SwiGLU";
    case Op::kDown: return "GEMV/GEMM ffn_down";
    case Op::kOutputNorm: return "residual + output norm";
    case Op::kOutput: return "GEMV/GEMM output head";
    case Op::kActQuant: return "activation quant/pack";
    case Op::kForkJoin: return "GEMV/GEMM fork/join wait";
    case Op::kOther: return "other (bias, copies)";
    case Op::kCount: break;
  }
  return "?";
}

void OpTimer::start() {
  kernels::matmul_profile_take();  // drop anything from outside this pass
  begin_ = last_ = kernels::detail::profile_now_ns();
}

void OpTimer::charge(Op op) {
  const int64_t now = kernels::detail::profile_now_ns();
  const int64_t wall = now - last_;
  last_ = now;
  const kernels::MatmulTimes mm = kernels::matmul_profile_take();
  if (mm.prep_ns == 0 && mm.rows_ns == 0) {
    p_->ns[static_cast<int>(op)] += wall;
    return;
  }
  p_->ns[static_cast<int>(op)] += mm.rows_ns;
  p_->ns[static_cast<int>(Op::kActQuant)] += mm.prep_ns;
  p_->ns[static_cast<int>(Op::kForkJoin)] += wall - mm.rows_ns - mm.prep_ns;
}

void OpTimer::finish() {
  charge(Op::kOther);
  p_->total_ns += last_ - begin_;
  ++p_->forwards;
}

void Model::set_profile(OpProfile* p) {
  profile_ = p;
  kernels::matmul_profile_enable(p != nullptr);
}

}  // namespace pdserve::model
