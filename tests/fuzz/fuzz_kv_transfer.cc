// libFuzzer target: what a decode worker does with a prefill worker's messages and what a
// prefill worker does with a decode worker's request — the KV codec (src/disagg/kv_codec*:
// block range check, zstd, CRC32C), the proto conversions (src/disagg/proto_convert*) and
// the reading of a failed call's status (src/disagg/grpc_status*) on arbitrary protobuf
// bytes (a malicious or buggy peer).
// Input: bytes 0..3 pick the receiver's layout (layers, blocks, cached blocks, block
// bytes), the rest is a serialised PrefillResponse, and the same bytes are parsed as a
// GenerateResponse and a PrefillRequest, and as the error details of a failed call (byte 0
// picks its gRPC code).
// Invariants: a block that passes the range check and decodes has exactly block_count ×
// block_bytes bytes of K and of V, whose CRC32C is the message's; re-encoded (none and zstd)
// it decodes to the same bytes; a converted SamplingParams / GenerateResponse converts back
// to the same message; a failed call's status reads as the code of its gRPC code or one
// that travels as it (the details cannot make, say, an UNAVAILABLE a bad request), with
// its message.
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "disagg/grpc_status.h"
#include "disagg/kv_codec.h"
#include "disagg/proto_convert.h"
#include "fuzz_util.h"

using namespace pdserve;

namespace {

void check_block(const disagg::CacheBlock& b, const uint8_t* layout) {
  const int n_layers = 1 + layout[0] % 4, total = 1 + layout[1] % 8, cached = layout[2] % total;
  const size_t block_bytes = 1 + layout[3] % 64;
  if (!disagg::check_block_range(b, n_layers, cached, total).ok()) return;
  std::string k, v;
  if (!disagg::decode_blocks(b, block_bytes, k, v).ok()) return;
  const size_t expect = static_cast<size_t>(b.block_count()) * block_bytes;
  PDS_FUZZ_CHECK(k.size() == expect && v.size() == expect, "decoded sizes");
  PDS_FUZZ_CHECK(disagg::crc32c(v.data(), v.size(), disagg::crc32c(k.data(), k.size())) == b.checksum(), "checksum");
  std::vector<const uint8_t*> kp, vp;
  for (int i = 0; i < b.block_count(); ++i) {
    kp.push_back(reinterpret_cast<const uint8_t*>(k.data()) + i * block_bytes);
    vp.push_back(reinterpret_cast<const uint8_t*>(v.data()) + i * block_bytes);
  }
  for (const char* codec : {"none", "zstd"}) {
    const disagg::CacheBlock again = disagg::encode_blocks(b.request_id(), b.layer(), b.first_block(), kp, vp, block_bytes, codec, 1);
    std::string k2, v2;
    PDS_FUZZ_CHECK(disagg::decode_blocks(again, block_bytes, k2, v2).ok(), "re-encoded block decodes");
    PDS_FUZZ_CHECK(k2 == k && v2 == v, "re-encoded block round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in string fields is logged, not an error
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t* msg = data + 4;
  const int n = static_cast<int>(size - 4);

  disagg::PrefillResponse res;
  if (res.ParseFromArray(msg, n)) {
    if (res.has_block()) check_block(res.block(), data);
    if (res.has_first()) {
      const engine::TokenLogprob lp = disagg::from_proto(res.first().token());
      disagg::TokenLogprob back;
      disagg::to_proto(lp, &back);
      const engine::TokenLogprob lp2 = disagg::from_proto(back);
      PDS_FUZZ_CHECK(lp2.token == lp.token && lp2.top.size() == lp.top.size(), "logprob round trip");
      for (size_t i = 0; i < lp.top.size(); ++i) PDS_FUZZ_CHECK(lp2.top[i].first == lp.top[i].first, "top logprob ids");
    }
  }
  disagg::GenerateResponse gr;
  if (gr.ParseFromArray(msg, n)) {
    const engine::StreamDelta d = disagg::from_proto(gr);
    disagg::GenerateResponse back;
    disagg::to_proto(d, &back);
    const engine::StreamDelta d2 = disagg::from_proto(back);
    PDS_FUZZ_CHECK(d2.tokens == d.tokens && d2.text == d.text && d2.finish == d.finish && d2.error == d.error,
                   "stream delta round trip");
  }
  disagg::PrefillRequest pr;
  if (pr.ParseFromArray(msg, n)) {
    const engine::SamplingParams p = disagg::from_proto(pr.params());
    disagg::SamplingParams back;
    disagg::to_proto(p, &back);
    const engine::SamplingParams p2 = disagg::from_proto(back);
    PDS_FUZZ_CHECK(p2.stop == p.stop && p2.grammar == p.grammar && p2.max_tokens == p.max_tokens && p2.seed == p.seed,
                   "sampling params round trip");
    std::string codec;
    int level = 0;
    (void)disagg::parse_codec(pr.codec(), codec, level);
  }
  const auto gcode = static_cast<grpc::StatusCode>(data[0] % 17);  // OK .. UNAUTHENTICATED
  const Status st = disagg::from_grpc(grpc::Status(gcode, "m", std::string(reinterpret_cast<const char*>(msg), n)));
  PDS_FUZZ_CHECK(st.ok() == (gcode == grpc::StatusCode::OK), "an error stays an error");
  if (!st.ok()) {
    PDS_FUZZ_CHECK(st.code() == disagg::from_grpc(gcode) || disagg::to_grpc(st.code()) == gcode, "details name a code of the call's");
    PDS_FUZZ_CHECK(st.message() == "m", "status message");
  }
  return 0;
}
