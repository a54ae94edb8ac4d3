#ifndef CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_H_
#define CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_H_

#include <cstdint>
#include <functional>

#include "absl/strings/string_view.h"

namespace cairn::infer {

// One step of a long model load: `done` of `total` `unit` ("bytes" or "layers") of `phase` (a
// few words: "hashing the weights", "placing the weights"). A phase reports its first step
// (done 0) and its last (done == total); steps between come as the work goes, done never
// decreasing within a phase.
struct LoadProgressStep {
  absl::string_view phase;
  int64_t done = 0;
  int64_t total = 0;
  absl::string_view unit;
};

// Called on the loading thread, between pieces of the work (it should return quickly: the
// load waits). Empty: no reports.
using LoadProgressFn = std::function<void(const LoadProgressStep&)>;

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_H_
