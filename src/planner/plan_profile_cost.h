// The planner's CostModel over a measured profile (planner/profile.h, `pdserve profile`).
#pragma once

#include "planner/plan_input.h"
#include "planner/profile.h"

namespace pdserve::planner {

class ProfileCostModel final : public CostModel {
 public:
  /// Keeps a reference: `p` must outlive this.
  explicit ProfileCostModel(const Profile& p) : p_(p) {}
  double prefill_seconds(int chunk_tokens, int cached_tokens) const override { return p_.prefill_seconds(chunk_tokens, cached_tokens); }
  double decode_step_seconds(int batch, int context) const override { return p_.decode_step_seconds(batch, context); }
  double transfer_seconds(std::size_t bytes) const override { return p_.transfer_seconds(bytes); }
  double kv_bytes_per_token() const override { return p_.kv_bytes_per_token; }

 private:
  const Profile& p_;
};

}  // namespace pdserve::planner
