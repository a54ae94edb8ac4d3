#ifndef CAIRN_SERVICES_INFER_ENGINE_STATE_LAYOUT_H_
#define CAIRN_SERVICES_INFER_ENGINE_STATE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace cairn::infer {

// Rows are grouped into chunks of this many rows (docs/architecture.md §2); a model-layout constant that
// is part of the compatibility identity.
inline constexpr int64_t kRowsPerChunk = 256;

enum class ComponentKind {
  kRows,     // Append-only, one row per token (attention K or V of one layer).
  kPrivate,  // Fixed size, valid at exactly one position (conv window, recurrent state).
};

// One piece of a slot's per-conversation state. All components hold fp32 values.
struct StateComponent {
  std::string name;  // e.g. "layers.3.k", "layers.0.recurrent".
  ComponentKind kind = ComponentKind::kRows;
  int layer = 0;
  int64_t floats = 0;  // kRows: floats per row; kPrivate: floats in total.

  int64_t bytes() const { return floats * static_cast<int64_t>(sizeof(float)); }
  bool operator==(const StateComponent&) const = default;
};

// The list of state components of a model, in a fixed order that models and the engine agree on.
struct StateLayout {
  std::vector<StateComponent> components;
  int64_t rows_per_chunk = kRowsPerChunk;

  // Bytes of all private components together (what a capture copies).
  int64_t private_bytes() const {
    int64_t total = 0;
    for (const StateComponent& c : components) {
      if (c.kind == ComponentKind::kPrivate) total += c.bytes();
    }
    return total;
  }
  bool operator==(const StateLayout&) const = default;

  // Bytes of one token's rows over all row components.
  int64_t row_bytes() const {
    int64_t total = 0;
    for (const StateComponent& c : components) {
      if (c.kind == ComponentKind::kRows) total += c.bytes();
    }
    return total;
  }
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_STATE_LAYOUT_H_
