#include "disagg/grpc_status.h"

namespace pdserve::disagg {

grpc::StatusCode to_grpc(StatusCode c) {
  switch (c) {
    case StatusCode::Ok: return grpc::StatusCode::OK;
    case StatusCode::InvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::NotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::FailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::ResourceExhausted:
    case StatusCode::RateLimited: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::Unavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::DeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::DataLoss: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::Cancelled: return grpc::StatusCode::CANCELLED;
    case StatusCode::Internal: return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::INTERNAL;
}

StatusCode from_grpc(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return StatusCode::Ok;
    case grpc::StatusCode::INVALID_ARGUMENT: return StatusCode::InvalidArgument;
    case grpc::StatusCode::NOT_FOUND: return StatusCode::NotFound;
    case grpc::StatusCode::FAILED_PRECONDITION: return StatusCode::FailedPrecondition;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return StatusCode::ResourceExhausted;
    case grpc::StatusCode::UNAVAILABLE: return StatusCode::Unavailable;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return StatusCode::DeadlineExceeded;
    case grpc::StatusCode::DATA_LOSS: return StatusCode::DataLoss;
    case grpc::StatusCode::CANCELLED: return StatusCode::Cancelled;
    default: return StatusCode::Internal;
  }
}

grpc::Status to_grpc(const Status& s) {
  return s.ok() ? grpc::Status::OK : grpc::Status(to_grpc(s.code()), s.message());
}

Status from_grpc(const grpc::Status& s) { return Status(from_grpc(s.error_code()), s.error_message()); }

}  // namespace pdserve::disagg
