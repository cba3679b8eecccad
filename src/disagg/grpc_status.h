// The one mapping between pdserve Status codes and gRPC statuses, for the worker RPCs:
// a worker answers with to_grpc(status), its caller decides on from_grpc(answer).code().
//
// Codes map to the canonical gRPC code of the same name, except RateLimited, which gRPC
// has no code for: it travels as RESOURCE_EXHAUSTED, as ResourceExhausted does. So that
// the caller can still tell them apart (a decode worker's caller answers 429 for one and
// 400 for the other), every error status also carries the pdserve code by name in its
// error details: an RpcStatus (proto/pdserve.proto; google.rpc.Status on the wire) with a
// StatusCodeInfo. A status without that detail (made by gRPC itself: a deadline, an
// unreachable peer, a cancel) is read by its gRPC code alone.
#pragma once

#include <grpcpp/grpcpp.h>

#include "base/status.h"

namespace pdserve::disagg {

/// The gRPC code of `c` (the canonical code of the same name; Ok → OK; RateLimited →
/// RESOURCE_EXHAUSTED).
grpc::StatusCode to_grpc(StatusCode c);
/// The Status code of a gRPC code alone: the code of the same name (RESOURCE_EXHAUSTED →
/// ResourceExhausted); gRPC codes pdserve has no name for (UNKNOWN, ABORTED, OUT_OF_RANGE,
/// UNIMPLEMENTED, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED) → Internal.
/// from_grpc(to_grpc(c)) == c for every c but RateLimited.
StatusCode from_grpc(grpc::StatusCode c);

/// `s` as a gRPC status: to_grpc(s.code()), the same message and, for an error, the
/// details naming s.code().
grpc::Status to_grpc(const Status& s);
/// A gRPC status as a Status: the same message; the code its details name when they name
/// one that maps to its gRPC code, else from_grpc(s.error_code()) (OK → Ok).
/// from_grpc(to_grpc(s)) has the code and message of s for every s.
Status from_grpc(const grpc::Status& s);

}  // namespace pdserve::disagg
