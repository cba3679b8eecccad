// gRPC channel and server settings for the cluster's links, chosen deliberately (and
// tunable per process with the --grpc-* flags, see GrpcTuning):
//  * messages carry one layer's new blocks: with 16-token blocks of a large model that is
//    a few MiB, so the message size limits are raised to 256 MiB;
//  * flow control: the HTTP/2 stream window starts at 8 MiB (BDP probing on, so gRPC
//    grows it to the link's bandwidth-delay product) so a prefill worker can run a few
//    layers ahead of a decode worker that is writing blocks, without unbounded buffering:
//    flow control then paces the sender. A small window on a long link caps a transfer at
//    window / RTT (the first entry of the troubleshooting table: decode latency spikes ⇒
//    KV transfer congestion ⇒ adjust the window);
//  * keepalive: every connection is pinged after 10 s without traffic (also without
//    calls) and dropped when no ack comes within 5 s, so a cut link fails the calls on it
//    (and the router resumes them elsewhere) instead of hanging until TCP gives up;
//    servers accept such pings (gRPC's default would answer them with GOAWAY
//    too_many_pings).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace pdserve::disagg {

constexpr int kMaxMessageBytes = 256 << 20;
constexpr int kStreamWindowBytes = 8 << 20;

/// The process-wide link settings (set once at start, before any channel is made).
struct GrpcTuning {
  int keepalive_time_ms = 10000;            // --grpc-keepalive-ms (0: no keepalive pings)
  int keepalive_timeout_ms = 5000;          // --grpc-keepalive-timeout-ms
  int stream_window_bytes = kStreamWindowBytes;  // --grpc-stream-window
  bool bdp_probe = true;                    // --grpc-bdp-probe
};
void set_grpc_tuning(const GrpcTuning& t);
const GrpcTuning& grpc_tuning();

/// Adds the keepalive settings above to channel arguments.
void add_keepalive_args(grpc::ChannelArguments& args);

/// A channel to `addr` ("host:port") with the settings above.
std::shared_ptr<grpc::Channel> make_channel(const std::string& addr);

/// Applies the settings above to a server being built.
void configure_server(grpc::ServerBuilder& b);

/// True for a loopback peer ("127.x.y.z:port", "localhost:port", "[::1]:port"): the
/// --kv-compression auto rule sends such links uncompressed and every other one zstd.
bool is_loopback_address(const std::string& host_port);

}  // namespace pdserve::disagg
