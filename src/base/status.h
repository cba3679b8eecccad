// Status / Result<T>: error values for code paths where failure is expected input
// (a corrupt model file, a bad request), not a programming error.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace pdserve {

/// A success or an error message. Cheap to copy; `ok()` is true on success.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string msg) { return Status(std::move(msg), true); }
  bool ok() const { return !err_; }
  const std::string& message() const { return msg_; }

 private:
  Status(std::string msg, bool err) : msg_(std::move(msg)), err_(err) {}
  std::string msg_;
  bool err_ = false;
};

/// A value of type T or an error message (like std::expected<T, std::string>).
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
  Status status() const { return ok() ? Status::Ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace pdserve
