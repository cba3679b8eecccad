// The Status ↔ gRPC mapping and the decisions the KV-transfer client makes from codes.
#include <gtest/gtest.h>

#include <vector>

#include "disagg/grpc_status.h"
#include "disagg/kv_codec.h"
#include "disagg/prefill_client.h"
#include "disagg/proto/pdserve.pb.h"

namespace pdserve::disagg {
namespace {

TEST(GrpcStatus, CodesMapToTheCanonicalGrpcCodes) {
  EXPECT_EQ(to_grpc(StatusCode::Ok), grpc::StatusCode::OK);
  EXPECT_EQ(to_grpc(StatusCode::InvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(to_grpc(StatusCode::NotFound), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(to_grpc(StatusCode::FailedPrecondition), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(to_grpc(StatusCode::ResourceExhausted), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(to_grpc(StatusCode::RateLimited), grpc::StatusCode::RESOURCE_EXHAUSTED);  // gRPC has no code of its own
  EXPECT_EQ(to_grpc(StatusCode::Unavailable), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(to_grpc(StatusCode::DeadlineExceeded), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(to_grpc(StatusCode::DataLoss), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(to_grpc(StatusCode::Cancelled), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(to_grpc(StatusCode::Internal), grpc::StatusCode::INTERNAL);
}

TEST(GrpcStatus, RoundTripKeepsCodeAndMessage) {
  for (StatusCode c : kStatusCodes) {
    // The gRPC code alone tells every code but RateLimited.
    EXPECT_EQ(from_grpc(to_grpc(c)), c == StatusCode::RateLimited ? StatusCode::ResourceExhausted : c) << name(c);
    // The status, with its details, tells every one (a 429 and a 400 through the router).
    const Status back = from_grpc(to_grpc(Status(c, "why")));
    EXPECT_EQ(back.code(), c) << name(c);
    EXPECT_EQ(back.message(), c == StatusCode::Ok ? "" : "why") << name(c);
  }
  EXPECT_TRUE(to_grpc(Status::Ok()).ok());
}

TEST(GrpcStatus, DetailsAreAGoogleRpcStatusNamingTheCode) {
  const grpc::Status st = to_grpc(Status::RateLimited("too many salts"));
  RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(st.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(details.message(), "too many salts");
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/pdserve.disagg.StatusCodeInfo");
  StatusCodeInfo info;
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.code(), "RateLimited");
}

TEST(GrpcStatus, StatusesWithoutUsableDetailsAreReadByTheirCode) {
  auto with_detail = [](grpc::StatusCode code, const std::string& named) {
    RpcStatus d;
    StatusCodeInfo info;
    info.set_code(named);
    d.add_details()->PackFrom(info);
    return grpc::Status(code, "m", d.SerializeAsString());
  };
  // gRPC's own statuses carry no details.
  EXPECT_EQ(from_grpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "m")).code(), StatusCode::ResourceExhausted);
  EXPECT_EQ(from_grpc(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "m")).code(), StatusCode::DeadlineExceeded);
  // Details that do not parse, name no code, or name one of another gRPC code.
  EXPECT_EQ(from_grpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "m", "\xff\xff")).code(),
            StatusCode::ResourceExhausted);
  EXPECT_EQ(from_grpc(with_detail(grpc::StatusCode::RESOURCE_EXHAUSTED, "Nope")).code(), StatusCode::ResourceExhausted);
  EXPECT_EQ(from_grpc(with_detail(grpc::StatusCode::UNAVAILABLE, "RateLimited")).code(), StatusCode::Unavailable);
  EXPECT_EQ(from_grpc(with_detail(grpc::StatusCode::UNAVAILABLE, "InvalidArgument")).code(), StatusCode::Unavailable);
  EXPECT_EQ(from_grpc(with_detail(grpc::StatusCode::RESOURCE_EXHAUSTED, "RateLimited")).code(), StatusCode::RateLimited);
}

TEST(GrpcStatus, CodesWithoutACounterpartAreInternal) {
  for (grpc::StatusCode c : {grpc::StatusCode::UNKNOWN, grpc::StatusCode::ABORTED, grpc::StatusCode::OUT_OF_RANGE,
                             grpc::StatusCode::UNIMPLEMENTED, grpc::StatusCode::ALREADY_EXISTS,
                             grpc::StatusCode::PERMISSION_DENIED, grpc::StatusCode::UNAUTHENTICATED})
    EXPECT_EQ(from_grpc(c), StatusCode::Internal) << static_cast<int>(c);
}

TEST(PrefillClientDecisions, FailureReasonsComeFromCodes) {
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::DeadlineExceeded), "timeout");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::FailedPrecondition), "handshake");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::InvalidArgument), "rejected");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::ResourceExhausted), "rejected");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::RateLimited), "rate_limited");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::Cancelled), "cancelled");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::Unavailable), "stream");
  EXPECT_STREQ(prefill_call_failure_reason(StatusCode::Internal), "stream");
}

TEST(PrefillClientDecisions, OnlyALayoutMismatchStopsTryingOtherWorkers) {
  for (StatusCode c : kStatusCodes)
    EXPECT_EQ(retry_on_other_prefill_worker(c), c != StatusCode::FailedPrecondition) << name(c);
}

TEST(KvCodec, CorruptBlockIsDataLossOtherFaultsInvalidArgument) {
  const size_t bytes = 64;
  std::vector<uint8_t> k(bytes, 1), v(bytes, 2);
  CacheBlock msg = encode_blocks("r", 0, 0, {k.data()}, {v.data()}, bytes, "none", 1);
  std::string ko, vo;
  ASSERT_TRUE(decode_blocks(msg, bytes, ko, vo).ok());
  CacheBlock corrupt = msg;
  corrupt.mutable_k()->at(3) ^= 1;
  EXPECT_EQ(decode_blocks(corrupt, bytes, ko, vo).code(), StatusCode::DataLoss);
  CacheBlock bad_codec = msg;
  bad_codec.set_codec("lz4");
  EXPECT_EQ(decode_blocks(bad_codec, bytes, ko, vo).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(decode_blocks(msg, bytes * 2, ko, vo).code(), StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace pdserve::disagg
