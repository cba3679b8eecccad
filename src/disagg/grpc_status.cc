#include "disagg/grpc_status.h"

#include "disagg/proto/pdserve.pb.h"

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
  if (s.ok()) return grpc::Status::OK;
  const grpc::StatusCode code = to_grpc(s.code());
  RpcStatus details;
  details.set_code(static_cast<int32_t>(code));
  details.set_message(s.message());
  StatusCodeInfo info;
  info.set_code(name(s.code()));
  details.add_details()->PackFrom(info);
  return grpc::Status(code, s.message(), details.SerializeAsString());
}

Status from_grpc(const grpc::Status& s) {
  StatusCode code = from_grpc(s.error_code());
  RpcStatus details;
  if (!s.ok() && !s.error_details().empty() && details.ParseFromString(s.error_details())) {
    for (const auto& any : details.details()) {
      StatusCodeInfo info;
      if (!any.UnpackTo(&info)) continue;
      // Only a code that travels as this gRPC code: a confused peer cannot turn, say, an
      // UNAVAILABLE into a bad request.
      if (auto named = status_code_from_name(info.code()); named && to_grpc(*named) == s.error_code()) code = *named;
      break;
    }
  }
  return Status(code, s.error_message());
}

}  // namespace pdserve::disagg
