#include "kv/radix_cache.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace pdserve::kv {

namespace {

constexpr double kLfuHalfLife = 4096.0;  // accesses

uint64_t hash_block(const int32_t* t, int n) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the token ids
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

struct RadixCache::Node {
  Node* parent = nullptr;
  std::vector<int32_t> tokens;  // block_size ids (empty for a root)
  int32_t block = -1;           // -1 for a root
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Node>>> children;
  size_t num_children = 0;
  uint64_t last_access = 0;
  double hits = 0;  // LFU count, aged at each access
};

Result<EvictionPolicy> parse_eviction_policy(const std::string& s) {
  if (s == "lru") return EvictionPolicy::kLru;
  if (s == "lfu") return EvictionPolicy::kLfu;
  return Status::Error("unknown eviction policy '" + s + "' (use lru or lfu)");
}

RadixCache::RadixCache(BlockPool& pool, int block_size, EvictionPolicy policy)
    : pool_(pool), block_size_(block_size), policy_(policy) {}

RadixCache::~RadixCache() = default;

RadixCache::Node* RadixCache::root(uint64_t ns) {
  auto& r = roots_[ns];
  if (!r) r = std::make_unique<Node>();
  return r.get();
}

void RadixCache::touch(Node* n) {
  ++clock_;
  n->hits = n->hits * std::exp2(-static_cast<double>(clock_ - n->last_access) / kLfuHalfLife) + 1.0;
  n->last_access = clock_;
}

double RadixCache::priority(const Node* n) const {
  if (policy_ == EvictionPolicy::kLru) return static_cast<double>(n->last_access);
  return n->hits * std::exp2(-static_cast<double>(clock_ - n->last_access) / kLfuHalfLife);
}

RadixCache::Node* RadixCache::match_prefix(uint64_t ns, const int32_t* tokens, int max_blocks,
                                           std::vector<int32_t>& out) {
  Node* node = root(ns);
  for (int b = 0; b < max_blocks; ++b) {
    const int32_t* t = tokens + static_cast<int64_t>(b) * block_size_;
    auto it = node->children.find(hash_block(t, block_size_));
    if (it == node->children.end()) break;
    Node* next = nullptr;
    for (auto& c : it->second)
      if (std::equal(c->tokens.begin(), c->tokens.end(), t)) next = c.get();
    if (!next) break;
    node = next;
    pool_.incref(node->block);
    touch(node);
    out.push_back(node->block);
  }
  return node;
}

RadixCache::Node* RadixCache::insert(Node* parent, const int32_t* tokens, int32_t* block) {
  auto& bucket = parent->children[hash_block(tokens, block_size_)];
  for (auto& c : bucket) {
    if (!std::equal(c->tokens.begin(), c->tokens.end(), tokens)) continue;
    if (c->block != *block) {
      // Same content computed twice (two requests prefilled it at once): keep the cached
      // block, drop the duplicate. Their K/V are bit-identical (batch invariance).
      pool_.incref(c->block);
      pool_.decref(*block);
      *block = c->block;
    }
    touch(c.get());
    return c.get();
  }
  auto n = std::make_unique<Node>();
  n->parent = parent;
  n->tokens.assign(tokens, tokens + block_size_);
  n->block = *block;
  pool_.set_cached(*block);
  touch(n.get());
  Node* raw = n.get();
  bucket.push_back(std::move(n));
  parent->num_children++;
  num_nodes_++;
  return raw;
}

int RadixCache::evict(int n) {
  if (n <= 0 || pool_.num_cached() == 0) return 0;
  // Min-heap of evictable leaves by priority; parents join when they become leaves.
  using Item = std::pair<double, Node*>;
  auto cmp = [](const Item& a, const Item& b) { return a.first > b.first; };
  std::priority_queue<Item, std::vector<Item>, decltype(cmp)> heap(cmp);
  std::vector<Node*> stack;
  for (auto& [ns, r] : roots_) stack.push_back(r.get());
  while (!stack.empty()) {
    Node* x = stack.back();
    stack.pop_back();
    for (auto& [h, bucket] : x->children)
      for (auto& c : bucket) stack.push_back(c.get());
    if (x->block >= 0 && x->num_children == 0 && pool_.ref_count(x->block) == 0) heap.push({priority(x), x});
  }
  int freed = 0;
  while (freed < n && !heap.empty()) {
    Node* x = heap.top().second;
    heap.pop();
    Node* parent = x->parent;
    pool_.release_cached(x->block);
    ++freed;
    --num_nodes_;
    const uint64_t h = hash_block(x->tokens.data(), block_size_);
    auto& bucket = parent->children[h];
    bucket.erase(std::find_if(bucket.begin(), bucket.end(), [&](auto& c) { return c.get() == x; }));  // frees x
    if (bucket.empty()) parent->children.erase(h);
    parent->num_children--;
    if (parent->block >= 0 && parent->num_children == 0 && pool_.ref_count(parent->block) == 0)
      heap.push({priority(parent), parent});
  }
  return freed;
}

}  // namespace pdserve::kv
