#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_INFER_CACHE_CLIENT_LAYOUT_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_INFER_CACHE_CLIENT_LAYOUT_H_

// The state layout the cache client's tests run with (cache_client_test.cc,
// cache_client_stalled_test.cc).

#include <cstdint>

#include "services/infer/engine/state_layout.h"

namespace cairn::infer::testing {

inline constexpr int64_t kMaxRows = 2048;
inline constexpr int64_t kRowFloats = 16;
inline constexpr int64_t kPrivateFloats = 1024;

// A hybrid's layout (rows and a private component), or, with `rows_only`, a pure-attention
// model's (plain Qwen3: no private state, docs/model.md §4).
inline StateLayout Layout(bool rows_only = false) {
  StateLayout layout;
  layout.components.push_back({"layers.1.k", ComponentKind::kRows, 1, kRowFloats});
  if (!rows_only) {
    layout.components.push_back({"layers.0.recurrent", ComponentKind::kPrivate, 0, kPrivateFloats});
  }
  return layout;
}

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_INFER_CACHE_CLIENT_LAYOUT_H_
