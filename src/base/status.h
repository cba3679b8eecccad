// Status / Result<T>: error values for code paths where failure is expected input
// (a corrupt model file, a bad request), not a programming error.
//
// A Status carries a code (what kind of failure, for callers to decide on) and a message
// (for people). Code decides, message explains: no caller compares messages.
// server/api_error maps codes to HTTP + OpenAI error types, disagg/grpc_status to gRPC.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pdserve {

/// What kind of failure a Status reports (a subset of the gRPC / absl canonical codes,
/// with the same meanings).
enum class StatusCode {
  Ok = 0,
  /// The caller's input is wrong (a bad request field, a malformed file or message);
  /// retrying the same input fails the same way.
  InvalidArgument,
  /// A named thing does not exist (a file, a model, a tensor).
  NotFound,
  /// The system is not in the state the operation needs (e.g. two workers' KV layouts
  /// differ); no retry helps until the configuration changes.
  FailedPrecondition,
  /// The request needs more of a resource (KV blocks, memory) than the server has.
  ResourceExhausted,
  /// The service cannot serve now (shutting down, no healthy worker); a retry may succeed.
  Unavailable,
  /// A cap on what concurrent requests hold together was reached (e.g. live cache_salt
  /// namespaces); the same request may succeed once others finish. HTTP 429; on the gRPC
  /// wire RESOURCE_EXHAUSTED (gRPC has no code of its own for it) with a detail naming
  /// RateLimited (disagg/grpc_status.h).
  RateLimited,
  /// A deadline passed before the operation finished.
  DeadlineExceeded,
  /// Data was corrupted (e.g. a KV block's checksum does not match).
  DataLoss,
  /// The operation was cancelled (an abort, the caller went away).
  Cancelled,
  /// A bug or an unexpected failure of a dependency.
  Internal,
};

/// The code's name as spelled above ("InvalidArgument"), for logs and tests.
inline const char* name(StatusCode c) {
  switch (c) {
    case StatusCode::Ok: return "Ok";
    case StatusCode::InvalidArgument: return "InvalidArgument";
    case StatusCode::NotFound: return "NotFound";
    case StatusCode::FailedPrecondition: return "FailedPrecondition";
    case StatusCode::ResourceExhausted: return "ResourceExhausted";
    case StatusCode::Unavailable: return "Unavailable";
    case StatusCode::RateLimited: return "RateLimited";
    case StatusCode::DeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::DataLoss: return "DataLoss";
    case StatusCode::Cancelled: return "Cancelled";
    case StatusCode::Internal: return "Internal";
  }
  return "Unknown";
}

/// Every StatusCode, in declaration order.
inline constexpr StatusCode kStatusCodes[] = {
    StatusCode::Ok,          StatusCode::InvalidArgument,  StatusCode::NotFound,    StatusCode::FailedPrecondition,
    StatusCode::ResourceExhausted, StatusCode::Unavailable, StatusCode::RateLimited, StatusCode::DeadlineExceeded,
    StatusCode::DataLoss,    StatusCode::Cancelled,        StatusCode::Internal};

/// The code whose name() is `s` (exact spelling); nullopt for any other string.
inline std::optional<StatusCode> status_code_from_name(std::string_view s) {
  for (StatusCode c : kStatusCodes)
    if (s == name(c)) return c;
  return std::nullopt;
}

/// A success or an error: a code plus a message. Cheap to copy; `ok()` is true on success.
class Status {
 public:
  Status() = default;
  /// An error with `code` (Ok gives success, and the message is dropped).
  Status(StatusCode code, std::string msg)
      : code_(code), msg_(code == StatusCode::Ok ? std::string() : std::move(msg)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::InvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::NotFound, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) { return {StatusCode::FailedPrecondition, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) { return {StatusCode::ResourceExhausted, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::Unavailable, std::move(msg)}; }
  static Status RateLimited(std::string msg) { return {StatusCode::RateLimited, std::move(msg)}; }
  static Status DeadlineExceeded(std::string msg) { return {StatusCode::DeadlineExceeded, std::move(msg)}; }
  static Status DataLoss(std::string msg) { return {StatusCode::DataLoss, std::move(msg)}; }
  static Status Cancelled(std::string msg) { return {StatusCode::Cancelled, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::Internal, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  /// The same code with "context: message" as the message (success stays success).
  Status annotate(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + msg_);
  }

 private:
  StatusCode code_ = StatusCode::Ok;
  std::string msg_;
};

/// A value of type T or an error Status (like std::expected<T, Status>).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status err) : v_(std::move(err)) {}  // NOLINT: must be an error status
  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  T& operator*() { return std::get<0>(v_); }
  /// The error message; empty when ok().
  std::string error() const { return ok() ? std::string() : std::get<1>(v_).message(); }
  /// The error's code; StatusCode::Ok when ok().
  StatusCode code() const { return ok() ? StatusCode::Ok : std::get<1>(v_).code(); }
  Status status() const { return ok() ? Status::Ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace pdserve
