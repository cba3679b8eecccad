// Block identity (chained SHA-256 keys), the stored value format, the disk tier (bounds,
// LRU, restore) and KvTiers' fetch/put over it. Redis is covered end to end by
// tests/integration/kv_store_redis_test.cc.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <string>
#include <vector>

#include "kv/block_key.h"
#include "kv/disk_store.h"
#include "kv/kv_tiers.h"
#include "kv/redis_store.h"
#include "support/wait.h"

namespace pdserve::kv {
namespace {

namespace fs = std::filesystem;

BlockKeyContext ctx() { return {"llama/2x64/h8kv4/ff172/v512", "bs16/l2/h4/d8", "f16"}; }

std::string temp_dir(const char* name) {
  std::string d = fs::temp_directory_path() / ("pdserve-kvstore-" + std::string(name) + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(BlockKey, ChainsOverParentTokensAndContext) {
  std::vector<int32_t> t(32);
  std::iota(t.begin(), t.end(), 1);
  const BlockKey ns = chain_namespace(ctx(), "");
  const auto keys = chain_keys(ns, t.data(), 2, 16);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], block_key(BlockKey{}, ns, t.data(), 16));
  EXPECT_EQ(keys[1], block_key(keys[0], ns, t.data() + 16, 16));
  // The same second block after another first block is another key.
  std::vector<int32_t> u = t;
  u[0] = 999;
  EXPECT_NE(chain_keys(ns, u.data(), 2, 16)[1], keys[1]);
  // Salt, model, layout and dtype each change the key.
  EXPECT_NE(chain_keys(chain_namespace(ctx(), "tenant-a"), t.data(), 1, 16)[0], keys[0]);
  for (int f = 0; f < 3; ++f) {
    BlockKeyContext c = ctx();
    (f == 0 ? c.model_fingerprint : f == 1 ? c.layout : c.dtype) += "x";
    EXPECT_NE(chain_keys(chain_namespace(c, ""), t.data(), 1, 16)[0], keys[0]) << f;
  }
  // Length-prefixed fields: moving a character between fields changes the namespace.
  EXPECT_NE(chain_namespace({"ab", "c", "f16"}, ""), chain_namespace({"a", "bc", "f16"}, ""));
}

TEST(StoredBlock, RoundTripsAndRejectsEveryMismatch) {
  std::vector<int32_t> t(16);
  std::iota(t.begin(), t.end(), 7);
  const BlockKey key = chain_keys(chain_namespace(ctx(), ""), t.data(), 1, 16)[0];
  std::string payload(300, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31);
  const std::string v = encode_stored_block(key, t.data(), 16, payload);
  auto ok = decode_stored_block(v, key, t.data(), 16, payload.size());
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok.value(), payload);

  std::string flipped = v;
  flipped[60] ^= 1;  // a byte of the token ids
  EXPECT_FALSE(decode_stored_block(flipped, key, t.data(), 16, payload.size()).ok());
  flipped = v;
  flipped[v.size() - 100] ^= 0x40;  // a payload byte
  EXPECT_FALSE(decode_stored_block(flipped, key, t.data(), 16, payload.size()).ok());
  EXPECT_FALSE(decode_stored_block(v.substr(0, v.size() - 1), key, t.data(), 16, payload.size()).ok());  // truncated
  // A well-formed value for other tokens (re-checksummed) under this key is still rejected.
  std::vector<int32_t> other = t;
  other[3] = 4;
  const std::string forged = encode_stored_block(key, other.data(), 16, payload);
  EXPECT_FALSE(decode_stored_block(forged, key, t.data(), 16, payload.size()).ok());
  BlockKey k2 = key;
  k2[0] ^= 1;
  EXPECT_FALSE(decode_stored_block(v, k2, t.data(), 16, payload.size()).ok());
  EXPECT_FALSE(decode_stored_block(v, key, t.data(), 16, payload.size() + 2).ok());
}

int64_t dir_bytes(const std::string& d) {
  int64_t n = 0;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().extension() == ".kvb") n += static_cast<int64_t>(e.file_size());
  return n;
}

BlockKey nth_key(int i) {
  const int32_t t = i;
  return block_key(BlockKey{}, chain_namespace(ctx(), ""), &t, 1);
}

TEST(DiskStore, BoundedLruAndRestore) {
  const std::string dir = temp_dir("lru");
  const std::string value(1000, 'v');
  {
    auto st = DiskKvStore::open(dir, 5500, true);
    ASSERT_TRUE(st.ok()) << st.error();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(st.value()->put(nth_key(i), value).ok());
    ASSERT_TRUE(st.value()->get(nth_key(0)).value().has_value());  // 0 is now the most recent
    ASSERT_TRUE(st.value()->put(nth_key(5), value).ok());  // evicts 1, the least recent
    EXPECT_FALSE(st.value()->get(nth_key(1)).value().has_value());
    EXPECT_TRUE(st.value()->get(nth_key(0)).value().has_value());
    EXPECT_EQ(st.value()->num_blocks(), 5);
    EXPECT_LE(dir_bytes(dir), 5500);
    st.value()->snapshot();
  }
  {
    auto st = DiskKvStore::open(dir, 5500, true);  // restart: same contents, same LRU order
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st.value()->num_blocks(), 5);
    EXPECT_EQ(*st.value()->get(nth_key(5)).value(), value);
    ASSERT_TRUE(st.value()->put(nth_key(6), value).ok());  // evicts 2 (1 is gone, 0 was used after 2)
    EXPECT_FALSE(st.value()->has_local(nth_key(2)));
    EXPECT_TRUE(st.value()->has_local(nth_key(0)));
  }
  {
    auto st = DiskKvStore::open(dir, 5500, false);  // --kv-restore off: starts empty
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st.value()->num_blocks(), 0);
    EXPECT_EQ(dir_bytes(dir), 0);
  }
  fs::remove_all(dir);
}

TEST(DiskStore, ABlockWhoseFileWasRemovedIsWrittenAgain) {
  // put() skipped a key its index held even when the file was gone (rm of the directory's
  // files): the tier never refilled and its gauges counted blocks it did not have.
  const std::string dir = temp_dir("gone");
  auto st = DiskKvStore::open(dir, 1 << 20, true);
  ASSERT_TRUE(st.ok()) << st.error();
  ASSERT_TRUE(st.value()->put(nth_key(0), std::string(100, 'a')).ok());
  const fs::path f = fs::path(dir) / (pdserve::to_hex(nth_key(0)) + ".kvb");
  ASSERT_TRUE(fs::exists(f));
  fs::remove(f);
  ASSERT_TRUE(st.value()->put(nth_key(0), std::string(100, 'a')).ok());
  EXPECT_TRUE(fs::exists(f));
  EXPECT_EQ(st.value()->num_blocks(), 1);
  EXPECT_EQ(st.value()->num_bytes(), 100);
  fs::remove_all(dir);
}

TEST(DiskStore, UnwritableDirIsAOneLineError) {
  auto st = DiskKvStore::open("/proc/pdserve-no-such-dir", 1 << 20, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().find("--kv-offload-dir"), std::string::npos);
  EXPECT_EQ(st.error().find('\n'), std::string::npos);
}

TEST(RedisUrl, ParsesAndRejects) {
  auto u = parse_redis_url("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u.value().host, "127.0.0.1");
  EXPECT_EQ(u.value().port, 6380);
  EXPECT_EQ(u.value().db, 2);
  EXPECT_EQ(parse_redis_url("redis://h").value().port, 6379);
  for (const char* bad : {"http://h:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:x", "redis://h:1/x", "redis://:5"})
    EXPECT_FALSE(parse_redis_url(bad).ok()) << bad;
}

TEST(KvTiers, WritesThroughAndFetchesInOrderUntilTheFirstMiss) {
  const std::string dir = temp_dir("tiers");
  KvTierOptions o;
  o.offload_dir = dir;
  o.offload_bytes = 1 << 20;
  auto tiers = KvTiers::open(o);
  ASSERT_TRUE(tiers.ok()) << tiers.error();
  KvTiers& t = *tiers.value();
  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 3);
  const auto keys = chain_keys(chain_namespace(ctx(), ""), tokens.data(), 4, 16);
  const size_t pb = 256;
  auto payload = [&](int b) { return std::string(pb, static_cast<char>('a' + b)); };
  for (int b : {0, 1, 3})  // block 2 never written
    t.put(keys[b], std::vector<int32_t>(tokens.begin() + 16 * b, tokens.begin() + 16 * (b + 1)), payload(b));
  ASSERT_TRUE(testing::wait_until([&] { return t.pending_writes() == 0; }));
  EXPECT_TRUE(t.may_have(keys[0]));
  EXPECT_FALSE(t.may_have(keys[2]));

  std::promise<void> done;
  t.fetch(7, 0, keys, tokens, 16, pb, [&] { done.set_value(); });
  done.get_future().wait();
  auto r = t.take_fetched();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ticket, 7u);
  ASSERT_EQ(r[0].payloads.size(), 2u);  // blocks 0 and 1; 2 misses, so 3 is not used
  EXPECT_EQ(r[0].payloads[1], payload(1));

  // A tampered file is rejected, counted as an error, and ends the chain there.
  fs::path f = fs::path(dir) / (pdserve::to_hex(keys[1]) + ".kvb");
  std::string bytes;
  {
    std::ifstream in(f, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 40] ^= 1;
  {
    std::ofstream out(f, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  std::promise<void> done2;
  t.fetch(8, 0, keys, tokens, 16, pb, [&] { done2.set_value(); });
  done2.get_future().wait();
  r = t.take_fetched();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].payloads.size(), 1u);
  const auto st = t.stats();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].tier, "disk");
  EXPECT_EQ(st[0].writes, 3);
  EXPECT_EQ(st[0].hits, 3);
  EXPECT_EQ(st[0].errors, 1);
  // The rejected block is forgotten (file and index), so its recomputed block is stored again
  // and then found: before, the index kept the key and put() skipped it as already stored.
  EXPECT_FALSE(t.may_have(keys[1]));
  EXPECT_FALSE(fs::exists(f));
  t.put(keys[1], std::vector<int32_t>(tokens.begin() + 16, tokens.begin() + 32), payload(1));
  ASSERT_TRUE(testing::wait_until([&] { return t.pending_writes() == 0; }));
  // A file removed behind the store's back is forgotten at the next read, and stored again.
  fs::remove(fs::path(dir) / (pdserve::to_hex(keys[0]) + ".kvb"));
  std::promise<void> done3;
  t.fetch(9, 0, keys, tokens, 16, pb, [&] { done3.set_value(); });
  done3.get_future().wait();
  EXPECT_EQ(t.take_fetched()[0].payloads.size(), 0u);
  EXPECT_FALSE(t.may_have(keys[0]));
  t.put(keys[0], std::vector<int32_t>(tokens.begin(), tokens.begin() + 16), payload(0));
  ASSERT_TRUE(testing::wait_until([&] { return t.pending_writes() == 0; }));
  std::promise<void> done4;
  t.fetch(10, 0, keys, tokens, 16, pb, [&] { done4.set_value(); });
  done4.get_future().wait();
  r = t.take_fetched();
  ASSERT_EQ(r[0].payloads.size(), 2u);
  EXPECT_EQ(r[0].payloads[1], payload(1));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pdserve::kv
