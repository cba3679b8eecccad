// gRPC channel and server settings for KV streams, chosen deliberately:
//  * messages carry one layer's new blocks: with 16-token blocks of a large model that is
//    a few MiB, so the message size limits are raised to 256 MiB;
//  * the HTTP/2 stream window is 8 MiB (BDP probing on) so a prefill worker can run a
//    few layers ahead of a decode worker that is writing blocks, without unbounded
//    buffering: flow control then paces the sender.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace pdserve::disagg {

constexpr int kMaxMessageBytes = 256 << 20;
constexpr int kStreamWindowBytes = 8 << 20;

/// A channel to `addr` ("host:port") with the settings above.
std::shared_ptr<grpc::Channel> make_channel(const std::string& addr);

/// Applies the settings above to a server being built.
void configure_server(grpc::ServerBuilder& b);

}  // namespace pdserve::disagg
