#ifndef CAIRN_SERVICES_CACHE_CORE_RADIX_PREFIX_INDEX_H_
#define CAIRN_SERVICES_CACHE_CORE_RADIX_PREFIX_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// Length of the longest common prefix of `a` and `b`.
int64_t CommonPrefixLength(absl::Span<const TokenId> a, absl::Span<const TokenId> b);

// What a prefix-index node can hold: a live slot frontier (id = the cache's frontier id) or a
// checkpoint (id = CheckpointId; its tiers live in the checkpoint table, not here).
struct IndexEntry {
  enum class Kind { kLive, kCheckpoint };
  Kind kind = Kind::kCheckpoint;
  uint64_t id = 0;
  friend bool operator==(const IndexEntry& a, const IndexEntry& b) {
    return a.kind == b.kind && a.id == b.id;
  }
};

// A compressed radix tree over token sequences for one compatibility identity. Each node
// holds the entries whose token sequence ends exactly at its depth. Metadata only: ids and
// depths, never bytes.
//
// Invariants: (1) every non-root node has a non-empty edge, and its parent's child map keys it
// by the edge's first token; (2) every non-root node holds an entry or has a child, and a node
// without entries has at least two children (paths are compressed); (3) a node's depth is its
// parent's depth plus its edge length. Node handles stay valid until their last entry is
// removed (splits and merges never move a node that holds entries).
// Thread-compatible.
class RadixPrefixIndex {
 public:
  struct Node;
  // Opaque reference to a node that holds at least one entry.
  using Handle = const Node*;

  struct Hit {
    int64_t depth = 0;
    IndexEntry entry;
    Handle node = nullptr;
  };
  struct Walk {
    std::vector<Hit> hits;      // Every entry on the prompt's path, shallowest first.
    int64_t shared_prefix = 0;  // Longest prefix of the prompt shared with any indexed path.
  };
  // One node of an exported tree.
  struct ExportedNode {
    int64_t depth = 0;
    int parent = -1;                  // Index into the export; -1 = the root (depth 0).
    std::vector<IndexEntry> entries;  // Those `keep` accepted.
  };
  struct Export {
    std::vector<ExportedNode> nodes;  // Parents before children, branches in token order.
    bool truncated = false;           // More nodes than max_nodes.
  };

  RadixPrefixIndex();
  ~RadixPrefixIndex();
  RadixPrefixIndex(const RadixPrefixIndex&) = delete;
  RadixPrefixIndex& operator=(const RadixPrefixIndex&) = delete;

  // Adds `entry` at the node for `tokens` (creating or splitting nodes) and returns that node.
  // An entry may be inserted at most once per sequence (CHECKed: the cache owns the ids).
  Handle Insert(absl::Span<const TokenId> tokens, IndexEntry entry);
  // Removes `entry` from `node`, pruning and re-compressing the tree. `node` must hold it.
  void Remove(Handle node, IndexEntry entry);
  // Walks `tokens` from the root and returns every entry whose sequence is a prefix of
  // `tokens`, plus the longest shared prefix. Cost: O(len(tokens)) comparisons.
  Walk Lookup(absl::Span<const TokenId> tokens) const;

  // The tree restricted to the entries `keep` accepts: a node for every depth holding such
  // an entry and for every branch point between them, each linked to its nearest exported
  // ancestor; at most `max_nodes`. Copies no tokens. Cost: O(nodes).
  Export ExportTree(const std::function<bool(const IndexEntry&)>& keep, size_t max_nodes) const;

  // The token sequence that ends at `node`.
  std::vector<TokenId> TokensAt(Handle node) const;
  static int64_t DepthAt(Handle node);
  // True if two or more continuations branch at `node`.
  static bool IsBranchPoint(Handle node);
  // True if nothing continues past `node`.
  static bool IsLeaf(Handle node);
  // Entries at strict ancestors of `node` no more than `max_distance` tokens shallower.
  static std::vector<Hit> NearAncestors(Handle node, int64_t max_distance);
  // Entries at `node`.
  static const std::vector<IndexEntry>& EntriesAt(Handle node);

  size_t node_count() const { return node_count_; }
  // Tokens stored on all edges: the size of the union of every indexed sequence.
  int64_t token_count() const { return token_count_; }
  bool empty() const;

 private:
  std::unique_ptr<Node> root_;
  size_t node_count_ = 1;
  int64_t token_count_ = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_RADIX_PREFIX_INDEX_H_
