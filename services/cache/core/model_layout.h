#ifndef CAIRN_SERVICES_CACHE_CORE_MODEL_LAYOUT_H_
#define CAIRN_SERVICES_CACHE_CORE_MODEL_LAYOUT_H_

// The shape of a model's per-conversation state as the cache sees it (docs/architecture.md §2): a
// list of components, each either append-only rows (one row per token, grouped into chunks of
// `chunk_rows`) or private state (fixed size, valid at exactly one position). Sizes only;
// the cache core never touches bytes. Mapping the proto ModelLayout to this struct is the
// daemon's job.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cairn::cache {

enum class ComponentKind { kRows, kPrivate };

struct StateComponent {
  std::string name;
  ComponentKind kind = ComponentKind::kRows;
  int64_t bytes_per_row = 0;  // kRows only.
  int64_t private_bytes = 0;  // kPrivate only.
};

// Thread-compatible value type.
struct ModelLayout {
  static constexpr int64_t kDefaultChunkRows = 256;  // Seed §4: Flash-Next's chunk size.
  // Bounds that keep every size computed from a layout inside int64 with room to spare: a
  // chunk, the private state, and the rows of the deepest checkpoint (kMaxTokens tokens).
  static constexpr int64_t kMaxTokens = int64_t{1} << 24;
  static constexpr int64_t kMaxStateBytes = int64_t{1} << 48;

  std::vector<StateComponent> components;
  int64_t chunk_rows = kDefaultChunkRows;

  // Returns InvalidArgument naming the field (`chunk_rows`, `components[i].bytes_per_row`,
  // ...) when a size is negative or of the wrong kind, names repeat, `chunk_rows` < 1,
  // the layout holds no state at all, or a size computed from it (a chunk, the private
  // state, kMaxTokens rows) would exceed kMaxStateBytes. (A zero-byte component is allowed
  // here, for simulations; the daemon refuses one from the wire.)
  absl::Status Validate() const;

  // Bytes of one token's rows over all row components.
  int64_t RowBytes() const;
  // Bytes of all private components (one copy per checkpoint).
  int64_t PrivateBytes() const;
  // Bytes of one full chunk over all row components.
  int64_t ChunkBytes() const { return chunk_rows * RowBytes(); }
  // Full chunks covering rows [0, depth).
  int64_t FullChunks(int64_t depth) const { return depth / chunk_rows; }
  // Bytes of the tail (the last partial chunk) a checkpoint at `depth` owns.
  int64_t TailBytes(int64_t depth) const { return (depth % chunk_rows) * RowBytes(); }
  // Bytes one self-contained copy of the state at `depth` would take (no sharing).
  int64_t FullCopyBytes(int64_t depth) const { return depth * RowBytes() + PrivateBytes(); }
};

// Who may share state with whom. `compatibility` covers model, weights, tokenizer and
// template, layout, numerics class and speculative decoding: one prefix tree per value.
// `input` covers non-text inputs (media digests); a candidate is usable only when equal.
struct Identities {
  std::string compatibility;
  std::string input;
  friend bool operator==(const Identities& a, const Identities& b) {
    return a.compatibility == b.compatibility && a.input == b.input;
  }
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_MODEL_LAYOUT_H_
