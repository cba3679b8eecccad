// Status and Result: codes, messages and annotation.
#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "base/status.h"

namespace pdserve {
namespace {

TEST(Status, FactoriesCarryTheirCode) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().code(), StatusCode::Ok);
  EXPECT_EQ(Status::InvalidArgument("x").code(), StatusCode::InvalidArgument);
  EXPECT_EQ(Status::NotFound("x").code(), StatusCode::NotFound);
  EXPECT_EQ(Status::FailedPrecondition("x").code(), StatusCode::FailedPrecondition);
  EXPECT_EQ(Status::ResourceExhausted("x").code(), StatusCode::ResourceExhausted);
  EXPECT_EQ(Status::Unavailable("x").code(), StatusCode::Unavailable);
  EXPECT_EQ(Status::DeadlineExceeded("x").code(), StatusCode::DeadlineExceeded);
  EXPECT_EQ(Status::DataLoss("x").code(), StatusCode::DataLoss);
  EXPECT_EQ(Status::Cancelled("x").code(), StatusCode::Cancelled);
  EXPECT_EQ(Status::Internal("x").code(), StatusCode::Internal);
  const Status s = Status::Unavailable("no worker");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "no worker");
  EXPECT_STREQ(name(s.code()), "Unavailable");
}

TEST(Status, EveryCodeIsListedAndFoundByItsName) {
  int expected = 0;
  for (StatusCode c : kStatusCodes) {
    EXPECT_EQ(static_cast<int>(c), expected++) << "kStatusCodes lists the codes in declaration order";
    EXPECT_EQ(status_code_from_name(name(c)), c) << name(c);
  }
  EXPECT_EQ(static_cast<int>(kStatusCodes[std::size(kStatusCodes) - 1]), static_cast<int>(StatusCode::Internal));
  EXPECT_EQ(status_code_from_name("RateLimited"), StatusCode::RateLimited);
  EXPECT_EQ(status_code_from_name("ratelimited"), std::nullopt);
  EXPECT_EQ(status_code_from_name(""), std::nullopt);
  EXPECT_EQ(status_code_from_name("Unknown"), std::nullopt);
}

TEST(Status, OkCodeIsSuccessWithoutMessage) {
  const Status s(StatusCode::Ok, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(Status, AnnotateKeepsTheCode) {
  const Status s = Status::NotFound("no such tensor").annotate("model.gguf");
  EXPECT_EQ(s.code(), StatusCode::NotFound);
  EXPECT_EQ(s.message(), "model.gguf: no such tensor");
  EXPECT_TRUE(Status::Ok().annotate("model.gguf").ok());
}

TEST(Result, ErrorCarriesCodeAndMessage) {
  Result<int> bad = Status::ResourceExhausted("too big");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), StatusCode::ResourceExhausted);
  EXPECT_EQ(bad.error(), "too big");
  EXPECT_EQ(bad.status().code(), StatusCode::ResourceExhausted);
  Result<int> good = 3;
  EXPECT_TRUE(good.ok());
  EXPECT_EQ(good.code(), StatusCode::Ok);
  EXPECT_EQ(good.error(), "");
}

}  // namespace
}  // namespace pdserve
