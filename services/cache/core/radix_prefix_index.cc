#include "services/cache/core/radix_prefix_index.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/status/check.h"

namespace cairn::cache {

struct RadixPrefixIndex::Node {
  Node* parent = nullptr;
  std::vector<TokenId> edge;  // Tokens from the parent to this node.
  int64_t depth = 0;          // Tokens from the root to the end of `edge`.
  absl::flat_hash_map<TokenId, std::unique_ptr<Node>> children;  // By first edge token.
  std::vector<IndexEntry> entries;
};

int64_t CommonPrefixLength(absl::Span<const TokenId> a, absl::Span<const TokenId> b) {
  size_t n = std::min(a.size(), b.size());
  auto mismatch = std::mismatch(a.begin(), a.begin() + n, b.begin());
  return static_cast<int64_t>(mismatch.first - a.begin());
}

namespace {

size_t CommonPrefix(absl::Span<const TokenId> a, absl::Span<const TokenId> b) {
  return static_cast<size_t>(CommonPrefixLength(a, b));
}

}  // namespace

RadixPrefixIndex::RadixPrefixIndex() : root_(std::make_unique<Node>()) {}
RadixPrefixIndex::~RadixPrefixIndex() = default;

bool RadixPrefixIndex::empty() const { return root_->children.empty() && root_->entries.empty(); }

RadixPrefixIndex::Handle RadixPrefixIndex::Insert(absl::Span<const TokenId> tokens,
                                                  IndexEntry entry) {
  Node* node = root_.get();
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->parent = node;
      leaf->edge.assign(tokens.begin() + pos, tokens.end());
      leaf->depth = static_cast<int64_t>(tokens.size());
      token_count_ += static_cast<int64_t>(leaf->edge.size());
      Node* raw = leaf.get();
      node->children.emplace(tokens[pos], std::move(leaf));
      ++node_count_;
      node = raw;
      pos = tokens.size();
      break;
    }
    Node* child = it->second.get();
    size_t m = CommonPrefix(child->edge, tokens.subspan(pos));
    if (m < child->edge.size()) {
      // Split `child`'s edge at `m`: a new middle node takes the shared part; `child` keeps
      // its identity (and entries) below it.
      auto mid = std::make_unique<Node>();
      mid->parent = node;
      mid->edge.assign(child->edge.begin(), child->edge.begin() + m);
      mid->depth = node->depth + static_cast<int64_t>(m);
      std::unique_ptr<Node> detached = std::move(it->second);
      detached->edge.erase(detached->edge.begin(), detached->edge.begin() + m);
      detached->parent = mid.get();
      TokenId key = detached->edge.front();
      mid->children.emplace(key, std::move(detached));
      Node* raw_mid = mid.get();
      it->second = std::move(mid);
      ++node_count_;
      child = raw_mid;
    }
    node = child;
    pos += m;
  }
  CAIRN_CHECK(std::find(node->entries.begin(), node->entries.end(), entry) == node->entries.end());
  node->entries.push_back(entry);
  return node;
}

void RadixPrefixIndex::Remove(Handle handle, IndexEntry entry) {
  Node* node = const_cast<Node*>(handle);
  auto it = std::find(node->entries.begin(), node->entries.end(), entry);
  CAIRN_CHECK(it != node->entries.end());
  node->entries.erase(it);
  // Prune empty leaves upwards.
  while (node != root_.get() && node->entries.empty() && node->children.empty()) {
    Node* parent = node->parent;
    token_count_ -= static_cast<int64_t>(node->edge.size());
    parent->children.erase(node->edge.front());  // Destroys `node`.
    --node_count_;
    node = parent;
  }
  // Re-compress: an entry-less inner node with one child merges into that child, which keeps
  // its identity (it may hold entries and be referenced by handles).
  if (node != root_.get() && node->entries.empty() && node->children.size() == 1) {
    Node* parent = node->parent;
    std::unique_ptr<Node> only = std::move(node->children.begin()->second);
    node->children.clear();
    only->edge.insert(only->edge.begin(), node->edge.begin(), node->edge.end());
    only->parent = parent;
    parent->children[only->edge.front()] = std::move(only);  // Destroys `node`.
    --node_count_;
  }
}

RadixPrefixIndex::Walk RadixPrefixIndex::Lookup(absl::Span<const TokenId> tokens) const {
  Walk walk;
  const Node* node = root_.get();
  size_t pos = 0;
  while (true) {
    for (const IndexEntry& e : node->entries) walk.hits.push_back({node->depth, e, node});
    if (pos == tokens.size()) break;
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) break;
    const Node* child = it->second.get();
    size_t m = CommonPrefix(child->edge, tokens.subspan(pos));
    pos += m;
    if (m < child->edge.size()) break;
    node = child;
  }
  walk.shared_prefix = static_cast<int64_t>(pos);
  return walk;
}

std::vector<TokenId> RadixPrefixIndex::TokensAt(Handle node) const {
  std::vector<TokenId> out(static_cast<size_t>(node->depth));
  for (const Node* n = node; n != nullptr && n->parent != nullptr; n = n->parent) {
    std::copy(n->edge.begin(), n->edge.end(),
              out.begin() + (n->depth - static_cast<int64_t>(n->edge.size())));
  }
  return out;
}

int64_t RadixPrefixIndex::DepthAt(Handle node) { return node->depth; }
bool RadixPrefixIndex::IsBranchPoint(Handle node) { return node->children.size() >= 2; }
bool RadixPrefixIndex::IsLeaf(Handle node) { return node->children.empty(); }

const std::vector<IndexEntry>& RadixPrefixIndex::EntriesAt(Handle node) { return node->entries; }

std::vector<RadixPrefixIndex::Hit> RadixPrefixIndex::NearAncestors(Handle node,
                                                                   int64_t max_distance) {
  std::vector<Hit> out;
  for (const Node* n = node->parent; n != nullptr && node->depth - n->depth <= max_distance;
       n = n->parent) {
    for (const IndexEntry& e : n->entries) out.push_back({n->depth, e, n});
  }
  return out;
}

RadixPrefixIndex::Export RadixPrefixIndex::ExportTree(
    const std::function<bool(const IndexEntry&)>& keep, size_t max_nodes) const {
  // Pass 1 (post-order): how many children's subtrees hold a kept entry, and whether a
  // node's own subtree does.
  absl::flat_hash_map<const Node*, int> kept_children;
  std::function<bool(const Node*)> count = [&](const Node* n) -> bool {
    bool own = std::any_of(n->entries.begin(), n->entries.end(), keep);
    int children = 0;
    for (const auto& [token, child] : n->children) children += count(child.get()) ? 1 : 0;
    kept_children[n] = children;
    return own || children > 0;
  };
  count(root_.get());
  // Pass 2 (pre-order, children by first token): emit nodes holding kept entries and
  // branch points between kept subtrees.
  Export out;
  std::function<void(const Node*, int)> emit = [&](const Node* n, int parent) {
    if (out.truncated) return;
    std::vector<IndexEntry> entries;
    for (const IndexEntry& e : n->entries) {
      if (keep(e)) entries.push_back(e);
    }
    int here = parent;
    if (n != root_.get() && (!entries.empty() || kept_children[n] >= 2)) {
      if (out.nodes.size() >= max_nodes) {
        out.truncated = true;
        return;
      }
      out.nodes.push_back(ExportedNode{n->depth, parent, std::move(entries)});
      here = static_cast<int>(out.nodes.size()) - 1;
    }
    std::vector<std::pair<TokenId, const Node*>> order;
    for (const auto& [token, child] : n->children) {
      if (kept_children[child.get()] > 0 ||
          std::any_of(child->entries.begin(), child->entries.end(), keep)) {
        order.emplace_back(token, child.get());
      }
    }
    std::sort(order.begin(), order.end());
    for (const auto& [token, child] : order) emit(child, here);
  };
  emit(root_.get(), -1);
  return out;
}

}  // namespace cairn::cache
