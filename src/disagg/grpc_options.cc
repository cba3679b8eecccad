#include "disagg/grpc_options.h"

namespace pdserve::disagg {

namespace {
GrpcTuning g_tuning;
}

void set_grpc_tuning(const GrpcTuning& t) { g_tuning = t; }
const GrpcTuning& grpc_tuning() { return g_tuning; }

void add_keepalive_args(grpc::ChannelArguments& args) {
  if (g_tuning.keepalive_time_ms <= 0) return;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, g_tuning.keepalive_time_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, g_tuning.keepalive_timeout_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& addr) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, g_tuning.stream_window_bytes);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, g_tuning.bdp_probe ? 1 : 0);
  add_keepalive_args(args);
  // Reconnect quickly after a worker restarts (tests kill workers).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

void configure_server(grpc::ServerBuilder& b) {
  // No SO_REUSEPORT: a second worker on a port in use must fail to start, not share the
  // port's connections with the first (maybe another model's worker).
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.SetMaxReceiveMessageSize(kMaxMessageBytes);
  b.SetMaxSendMessageSize(kMaxMessageBytes);
  b.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, g_tuning.stream_window_bytes);
  b.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, g_tuning.bdp_probe ? 1 : 0);
  // Peers ping idle connections (keepalive above): allow it rather than GOAWAY them.
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  if (g_tuning.keepalive_time_ms > 0) {
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, g_tuning.keepalive_time_ms);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, g_tuning.keepalive_timeout_ms);
  }
}

bool is_loopback_address(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace pdserve::disagg
