// config.json parsing (the architecture, dimensions and layer kinds of a model folder).

#include "absl/strings/string_view.h"
#include "services/infer/models/model_config.h"
#include "tests/fuzz/fuzz_target.h"

CAIRN_FUZZ_TARGET(ModelConfig) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  cairn::infer::ParseHybridConfig(json).IgnoreError();  // Errors are fine; crashes are not.
  return 0;
}
