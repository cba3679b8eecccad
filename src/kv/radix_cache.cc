#include "kv/radix_cache.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <unordered_map>

namespace pdserve::kv {

namespace {

constexpr double kLfuHalfLife = 4096.0;  // accesses
constexpr size_t kIndexAbove = 8;        // children searched linearly up to this many, else hashed

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
  uint64_t hash = 0;            // of `tokens`: indexes, never decides
  const std::string* ns = nullptr;  // a root's namespace (its key in roots_)
  // Children in no order (each knows its slot, so removal is O(1)); with more than
  // kIndexAbove of them, also indexed by hash. Nodes live in RadixCache::nodes_.
  std::vector<Node*> children;
  std::unique_ptr<std::unordered_multimap<uint64_t, Node*>> index;
  size_t slot = 0;              // position in parent->children
  int64_t lock_ref = 0;  // sequences whose cached path ends at or below this node
  uint64_t last_access = 0;
  double hits = 0;       // LFU count, aged at each access
  double evict_key = 0;  // smaller is evicted first; fixed while in the leaf heap
  uint64_t id = 0;
  int64_t heap_pos = -1;  // index in leaves_ (an evictable leaf), else -1
  uint64_t idle_key = 0;  // a root's key in idle_roots_ (0: not there)
};

// The evictable leaves: a 4-ary min-heap of (evict_key, id, node) entries whose nodes know
// their index, so a leaf that gets locked, gains a child or is touched leaves it in
// O(log n). Keys live in the entries and a node's four children are adjacent, so a sift
// reads the contiguous heap, not the nodes.
namespace {

constexpr size_t kArity = 4;

bool before(const RadixCache::LeafEntry& a, const RadixCache::LeafEntry& b) {
  return a.key != b.key ? a.key < b.key : a.id < b.id;
}

}  // namespace

void RadixCache::heap_set(size_t i, const LeafEntry& e) {
  leaves_[i] = e;
  e.node->heap_pos = static_cast<int64_t>(i);
}

void RadixCache::heap_sift(size_t i) {
  const LeafEntry e = leaves_[i];
  while (i > 0 && before(e, leaves_[(i - 1) / kArity])) {  // up
    heap_set(i, leaves_[(i - 1) / kArity]);
    i = (i - 1) / kArity;
  }
  for (;;) {  // down
    const size_t first = kArity * i + 1;
    if (first >= leaves_.size()) break;
    size_t c = first;
    const size_t last = std::min(first + kArity, leaves_.size());
    for (size_t k = first + 1; k < last; ++k)
      if (before(leaves_[k], leaves_[c])) c = k;
    if (!before(leaves_[c], e)) break;
    heap_set(i, leaves_[c]);
    i = c;
  }
  heap_set(i, e);
}

void RadixCache::heap_push(Node* n) {
  leaves_.push_back({n->evict_key, n->id, n});
  heap_sift(leaves_.size() - 1);
}

void RadixCache::heap_erase(Node* n) {
  const size_t i = static_cast<size_t>(n->heap_pos);
  n->heap_pos = -1;
  const LeafEntry last = leaves_.back();
  leaves_.pop_back();
  if (last.node == n) return;
  heap_set(i, last);
  heap_sift(i);
}

RadixCache::Node* RadixCache::find_child(Node* parent, uint64_t hash, const int32_t* tokens) const {
  auto same = [&](const Node* c) { return c->hash == hash && std::equal(c->tokens.begin(), c->tokens.end(), tokens); };
  if (parent->index) {
    auto [lo, hi] = parent->index->equal_range(hash);
    for (auto it = lo; it != hi; ++it)
      if (same(it->second)) return it->second;
    return nullptr;
  }
  for (Node* c : parent->children)
    if (same(c)) return c;
  return nullptr;
}

void RadixCache::add_child(Node* parent, Node* child) {
  child->parent = parent;
  child->slot = parent->children.size();
  if (parent->index) {
    parent->index->emplace(child->hash, child);
  } else if (parent->children.size() + 1 > kIndexAbove) {
    parent->index = std::make_unique<std::unordered_multimap<uint64_t, Node*>>();
    for (Node* c : parent->children) parent->index->emplace(c->hash, c);
    parent->index->emplace(child->hash, child);
  }
  parent->children.push_back(child);
}

void RadixCache::remove_child(Node* child) {
  Node* parent = child->parent;
  if (parent->index) {
    auto [lo, hi] = parent->index->equal_range(child->hash);
    for (auto it = lo; it != hi; ++it)
      if (it->second == child) {
        parent->index->erase(it);
        break;
      }
  }
  auto& kids = parent->children;
  const size_t slot = child->slot;
  if (slot + 1 != kids.size()) {
    std::swap(kids[slot], kids.back());
    kids[slot]->slot = slot;
  }
  kids.pop_back();
  release_node(child);
}

RadixCache::RadixCache(BlockPool& pool, int block_size, EvictionPolicy policy)
    : pool_(pool), block_size_(block_size), policy_(policy) {}

RadixCache::~RadixCache() = default;

RadixCache::Node* RadixCache::new_node() {
  if (free_nodes_.empty()) return nodes_.emplace_back(std::make_unique<Node>()).get();
  Node* n = free_nodes_.back();
  free_nodes_.pop_back();
  return n;
}

void RadixCache::release_node(Node* n) {
  // Reset for reuse; the tokens' and children's capacity is kept (no allocation next time).
  n->parent = nullptr;
  n->tokens.clear();
  n->block = -1;
  n->hash = 0;
  n->ns = nullptr;
  n->children.clear();
  n->index.reset();
  n->slot = 0;
  n->lock_ref = 0;
  n->last_access = 0;
  n->hits = 0;
  n->evict_key = 0;
  n->heap_pos = -1;
  n->idle_key = 0;
  free_nodes_.push_back(n);
}

RadixCache::Node* RadixCache::root(const std::string& ns) {
  if (auto it = roots_.find(ns); it != roots_.end()) return it->second;
  if (!ns.empty()) {
    make_room_for_namespace();
    ++salted_;
  }
  auto it = roots_.emplace(ns, new_node()).first;
  it->second->ns = &it->first;
  it->second->id = next_id_++;
  return it->second;
}

void RadixCache::make_room_for_namespace() {
  while (max_namespaces_ > 0 && salted_ >= max_namespaces_ && !idle_roots_.empty())
    evict_namespace(idle_roots_.begin()->second);
}

void RadixCache::update_idle_root(Node* r) {
  const bool idle = !r->ns->empty() && r->lock_ref == 0 && !r->children.empty();
  if (idle == (r->idle_key != 0)) return;
  if (idle) {
    r->idle_key = next_idle_key_++;
    idle_roots_.emplace(r->idle_key, r);
  } else {
    idle_roots_.erase(r->idle_key);
    r->idle_key = 0;
  }
}

void RadixCache::evict_namespace(Node* r) {
  assert(r->parent == nullptr && r->lock_ref == 0);
  // No lock in the namespace: every node is evictable (lock_ref 0, no pool reference).
  std::vector<Node*> todo(r->children.begin(), r->children.end()), all;
  while (!todo.empty()) {
    Node* x = todo.back();
    todo.pop_back();
    all.push_back(x);
    todo.insert(todo.end(), x->children.begin(), x->children.end());
  }
  for (Node* x : all) {
    assert(x->lock_ref == 0 && pool_.ref_count(x->block) == 0);
    if (x->heap_pos >= 0) heap_erase(x);
    pool_.release_cached(x->block);
    --evictable_size_;
  }
  for (Node* x : all) release_node(x);
  r->children.clear();
  r->index.reset();
  ++namespaces_evicted_;
  maybe_free_root(r);
}

void RadixCache::touch(Node* n) {
  const bool in = n->heap_pos >= 0;
  if (in) heap_erase(n);
  ++clock_;
  n->hits = n->hits * std::exp2(-static_cast<double>(clock_ - n->last_access) / kLfuHalfLife) + 1.0;
  n->last_access = clock_;
  // LFU: hits·2^(-(now - last)/H) orders two nodes the same at every `now`, so its log,
  // log2(hits) + last/H, is a time-invariant key.
  n->evict_key = policy_ == EvictionPolicy::kLru ? static_cast<double>(n->last_access)
                                                 : std::log2(n->hits) + static_cast<double>(n->last_access) / kLfuHalfLife;
  if (in) heap_push(n);
}

void RadixCache::update_leaf(Node* n) {
  const bool leaf = n->block >= 0 && n->lock_ref == 0 && n->children.empty();
  if (leaf == (n->heap_pos >= 0)) return;
  if (leaf) heap_push(n);
  else heap_erase(n);
}

void RadixCache::add_lock(Node* n, int delta) {
  for (Node* x = n; x; x = x->parent) {
    const int64_t before = x->lock_ref;
    x->lock_ref += delta;
    assert(x->lock_ref >= 0);
    if (x->block < 0) {  // a root holds no block
      update_idle_root(x);
      continue;
    }
    if (before == 0 && x->lock_ref > 0) --evictable_size_, ++protected_size_;
    if (before > 0 && x->lock_ref == 0) ++evictable_size_, --protected_size_;
    update_leaf(x);
  }
}

void RadixCache::maybe_free_root(Node* r) {
  if (r->parent != nullptr || r->lock_ref != 0 || !r->children.empty()) return;
  if (r->idle_key != 0) idle_roots_.erase(r->idle_key);
  if (!r->ns->empty()) --salted_;
  roots_.erase(*r->ns);
  release_node(r);
}

RadixCache::Node* RadixCache::match_prefix(const std::string& ns, const int32_t* tokens, int max_blocks,
                                           std::vector<int32_t>& out) {
  Node* node = root(ns);
  for (int b = 0; b < max_blocks; ++b) {
    const int32_t* t = tokens + static_cast<int64_t>(b) * block_size_;
    Node* next = find_child(node, hash_block(t, block_size_), t);
    if (!next) break;
    node = next;
    pool_.incref(node->block);
    touch(node);
    out.push_back(node->block);
  }
  add_lock(node, +1);
  return node;
}

RadixCache::Node* RadixCache::match_partial(Node* parent, const int32_t* tokens, int max_tokens, int* shared) {
  assert(max_tokens < block_size_);
  Node* best = nullptr;
  int best_len = 0;
  for (Node* c : parent->children) {  // every child (the hash index is over whole blocks)
    int n = 0;
    while (n < max_tokens && c->tokens[static_cast<size_t>(n)] == tokens[n]) ++n;
    if (n > best_len) best = c, best_len = n;
  }
  if (best) touch(best);
  *shared = best_len;
  return best;
}

int32_t RadixCache::block_of(const Node* node) { return node->block; }

RadixCache::Node* RadixCache::insert(Node* parent, const int32_t* tokens, int32_t* block) {
  assert(parent->lock_ref > 0);
  const uint64_t hash = hash_block(tokens, block_size_);
  Node* child = find_child(parent, hash, tokens);
  if (child && child->block != *block) {
    // Same content computed twice (two requests prefilled it at once): keep the cached
    // block, drop the duplicate. Their K/V are bit-identical (batch invariance).
    pool_.incref(child->block);
    pool_.decref(*block);
    *block = child->block;
  }
  if (!child) {
    child = new_node();
    child->tokens.assign(tokens, tokens + block_size_);
    child->hash = hash;
    child->block = *block;
    child->id = next_id_++;
    pool_.set_cached(*block);
    add_child(parent, child);
    ++evictable_size_;  // lock_ref 0 until the lock moves onto it below
    update_leaf(parent);
  }
  touch(child);
  // Move the caller's lock from `parent` down to `child`: the ancestors' counts (which
  // include the child's) are unchanged, so only the child's own count changes.
  if (child->lock_ref++ == 0) --evictable_size_, ++protected_size_;
  update_leaf(child);
  return child;
}

void RadixCache::lock(Node* node) { add_lock(node, +1); }

void RadixCache::unlock(Node* node) {
  add_lock(node, -1);
  Node* r = node;
  while (r->parent) r = r->parent;
  maybe_free_root(r);
}

int RadixCache::evict(int n) {
  int freed = 0;
  while (freed < n && !leaves_.empty()) {
    Node* x = leaves_.front().node;
    heap_erase(x);
    assert(pool_.ref_count(x->block) == 0);
    pool_.release_cached(x->block);
    ++freed;
    --evictable_size_;
    Node* parent = x->parent;
    remove_child(x);  // x goes back to the node pool
    if (parent->parent) update_leaf(parent);
    else maybe_free_root(parent);
  }
  return freed;
}

}  // namespace pdserve::kv
