// disagg::GrpcKvSource (the decode worker's KV source) without a prefill worker: every
// transfer reports failure at once, and the per-transfer state it keeps is gone after.
#include <gtest/gtest.h>

#include <future>

#include "disagg/prefill_client.h"

namespace pdserve {
namespace {

/// Blocks nobody writes (no transfer gets far enough).
class NoBlocks final : public engine::KvBlockAccess {
 public:
  const engine::KvLayout& layout() const override { return layout_; }
  void write(int, int32_t, const void*, const void*) override { ADD_FAILURE() << "a block was written"; }

 private:
  engine::KvLayout layout_;
};

TEST(GrpcKvSource, CancelAfterTheTransferReportedKeepsNoState) {
  // The engine cancels a transfer of an aborted request while the sequence still awaits
  // KV; the transfer may have reported just before (its result not yet taken). Such a
  // late cancel() must not leave an entry per request behind (a slow leak on a decode
  // worker serving clients that abort).
  disagg::GrpcKvSource source(disagg::KvSourceConfig{}, nullptr);
  NoBlocks blocks;
  for (int64_t id = 1; id <= 100; ++id) {
    engine::RemotePrefillTask task;
    task.seq_id = id;
    task.prompt = {1, 2, 3};
    std::promise<engine::RemotePrefillResult> done;
    auto result = done.get_future();
    source.start(std::move(task), blocks, [&done](engine::RemotePrefillResult r) { done.set_value(std::move(r)); });
    const engine::RemotePrefillResult r = result.get();
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, "no healthy prefill worker");
    source.cancel(id);
  }
  EXPECT_EQ(source.transfers_tracked(), 0u);
}

}  // namespace
}  // namespace pdserve
