#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_MODELS_MODEL_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_MODELS_MODEL_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/models/model.h"
#include "services/infer/models/model_loader.h"

namespace cairn::infer::testing {

// Returns a folder private to this test process, under the test temporary directory; it is
// removed when the process exits.
std::string ScratchDir();

// Writes the random-checkpoint preset `name` into a fresh folder under ScratchDir() (once per
// process) and returns its path.
absl::StatusOr<std::string> PresetDir(const std::string& name);

// A CPU backend with a fixed thread count (two, the CI machine's cores).
std::unique_ptr<CpuKernelBackend> TestBackend();

// Loads preset `name` on `backend`.
absl::StatusOr<std::unique_ptr<Model>> LoadPreset(const std::string& name, KernelBackend* backend);
// The same with `options`.
absl::StatusOr<std::unique_ptr<Model>> LoadPreset(const std::string& name, KernelBackend* backend,
                                                  const ModelLoadOptions& options);

// Returns `n` pseudo-random token ids below `vocab` (fixed sequence for a given seed).
std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed);

// Returns the largest absolute difference between `a` and `b` (which must be the same size).
float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// Runs a fixed series of batches (prefill passes with and without all_logits beside decode
// steps, then decode steps of three, two and one sequences) twice, each time on fresh slots in
// `memory`: once through ForwardBatch, once through ForwardBatchInto into one results vector kept
// across the batches and seeded with stale vectors of other sizes, once through ForwardBatchViews
// into one vector of spans kept likewise (each batch's copied out before the next). Ok when every
// batch gives the same sizes and bits every way; else Internal naming the batch and sequence.
absl::Status CompareReusedResults(Model& model, DeviceMemory* memory, uint64_t seed);

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_MODELS_MODEL_TEST_UTIL_H_
