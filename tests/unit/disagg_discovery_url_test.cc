// --discovery URL parsing, the etcd gateway's base64, the loopback rule of
// --kv-compression auto.
#include <gtest/gtest.h>

#include "disagg/discovery.h"
#include "disagg/discovery_url.h"
#include "disagg/etcd_client.h"
#include "disagg/grpc_options.h"

namespace pdserve::disagg {
namespace {

TEST(DiscoveryUrl, Etcd) {
  auto u = parse_discovery_url("etcd://10.0.0.5:2379/cluster-a/");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u.value().kind, DiscoveryUrl::Kind::Etcd);
  EXPECT_EQ(u.value().host, "10.0.0.5");
  EXPECT_EQ(u.value().port, 2379);
  EXPECT_EQ(u.value().prefix, "/cluster-a");
  auto d = parse_discovery_url("etcd://etcd:2379");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().prefix, "/pdserve");
  EXPECT_EQ(discovery_key(d.value(), "decode", "10.1.2.3:7000"), "/pdserve/decode/10.1.2.3:7000");
}

TEST(DiscoveryUrl, DnsAndNone) {
  auto u = parse_discovery_url("dns://pdserve-decode.default.svc:7000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u.value().kind, DiscoveryUrl::Kind::Dns);
  EXPECT_EQ(u.value().host, "pdserve-decode.default.svc");
  EXPECT_EQ(u.value().port, 7000);
  EXPECT_EQ(parse_discovery_url("").value().kind, DiscoveryUrl::Kind::None);
}

TEST(DiscoveryUrl, Malformed) {
  for (const char* bad : {"etcd://h", "etcd://:1", "etcd://h:x", "etcd://h:0", "etcd://h:65536", "http://h:1",
                          "dns://h:1/p", "etcd://h:1/", "dns://h :1", "etcd:/h:1"}) {
    auto u = parse_discovery_url(bad);
    ASSERT_FALSE(u.ok()) << bad;
    EXPECT_EQ(u.status().code(), StatusCode::InvalidArgument);
    EXPECT_EQ(u.error().find('\n'), std::string::npos);
    EXPECT_EQ(u.error().rfind(std::string("--discovery '") + bad + "'", 0), 0u) << u.error();
  }
}

TEST(EtcdBase64, Rfc4648Vectors) {
  // RFC 4648 §10.
  const std::pair<const char*, const char*> v[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, enc] : v) {
    EXPECT_EQ(base64_encode(plain), enc);
    auto d = base64_decode(enc);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value(), plain);
  }
  EXPECT_FALSE(base64_decode("Zm9").ok());
  EXPECT_FALSE(base64_decode("Zm9v!!!=").ok());
}

TEST(KvCompressionAuto, LoopbackPeers) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1:7001"));
  EXPECT_TRUE(is_loopback_address("127.3.2.1:7001"));
  EXPECT_TRUE(is_loopback_address("localhost:7001"));
  EXPECT_TRUE(is_loopback_address("[::1]:7001"));
  EXPECT_FALSE(is_loopback_address("10.0.0.2:7001"));
  EXPECT_FALSE(is_loopback_address("prefill-0.pdserve-prefill:7001"));
  EXPECT_FALSE(is_loopback_address("128.0.0.1:7001"));
}

}  // namespace
}  // namespace pdserve::disagg
