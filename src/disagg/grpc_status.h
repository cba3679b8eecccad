// The one mapping between pdserve Status codes and gRPC status codes, for the worker RPCs:
// a worker answers with to_grpc(status), its caller decides on from_grpc(answer).code().
#pragma once

#include <grpcpp/grpcpp.h>

#include "base/status.h"

namespace pdserve::disagg {

/// The gRPC code of `c` (the canonical code of the same name; Ok → OK).
grpc::StatusCode to_grpc(StatusCode c);
/// The Status code of a gRPC code: the code of the same name; gRPC codes pdserve has no
/// name for (UNKNOWN, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, ALREADY_EXISTS,
/// PERMISSION_DENIED, UNAUTHENTICATED) → Internal. from_grpc(to_grpc(c)) == c for every c.
StatusCode from_grpc(grpc::StatusCode c);

/// `s` as a gRPC status (same message).
grpc::Status to_grpc(const Status& s);
/// A gRPC status as a Status (same message; OK → Ok).
Status from_grpc(const grpc::Status& s);

}  // namespace pdserve::disagg
