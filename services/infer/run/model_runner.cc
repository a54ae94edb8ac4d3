#include "services/infer/run/model_runner.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/models/load_progress_log.h"
#include "services/infer/models/model_loader.h"

namespace cairn::infer {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The `k` largest of `n` logits as [[id, logit], ...], largest first, lower ids first on ties.
nlohmann::json TopLogits(const float* row, int64_t n, int k) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [row](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  nlohmann::json pairs = nlohmann::json::array();
  for (int i = 0; i < k; ++i) pairs.push_back({ids[i], row[ids[i]]});
  return pairs;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view json_text) {
  // An array of integers nests one level; anything deeper is refused before parsing.
  nlohmann::json j =
      JsonNestingDepth(json_text, 1) > 1
          ? nlohmann::json(nlohmann::json::value_t::discarded)
          : nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("token ids must be a JSON array of integers");
  }
  std::vector<int32_t> ids;
  for (const nlohmann::json& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("bad token id ", v.dump()));
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

absl::StatusOr<nlohmann::json> RunModelOnce(const ModelRunOptions& options) {
  const int64_t n = static_cast<int64_t>(options.prompt_ids.size());
  if (n == 0) return absl::InvalidArgumentError("empty prompt");
  if (options.greedy < 0 || options.top < 0 || options.pass_tokens < 0) {
    return absl::InvalidArgumentError("--greedy, --top and --pass-tokens must be >= 0");
  }
  for (int64_t p : options.logits_at) {
    if (p < 0 || p >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits position ", p, " outside the prompt of ", n, " tokens"));
    }
  }
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<KernelBackend> backend,
                   CreateKernelBackend({.name = options.backend,
                                        .threads = options.threads,
                                        .cpu_spin_us = options.cpu_spin_us,
                                        .gpu_bf16_inputs = options.gpu_bf16_inputs}));
  ModelLoadOptions load;
  load.digest.cache_path = options.digest_cache;
  // A large model's load takes minutes: its progress on stderr (stdout is the run's).
  LoadProgressLogOptions progress_options;
  progress_options.write = [](const std::string& line) { std::cerr << line << "\n"; };
  LoadProgressLog load_log(std::move(progress_options));
  load.progress = load_log.AsFunction();
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(options.model_dir, backend.get(), load));
  const double load_ms = MillisSince(start);
  ASSIGN_OR_RETURN(
      std::unique_ptr<SlotState> slot,
      SlotState::Create(model->state_layout(), n + std::max(options.greedy, 1), backend->memory()));

  // Pass by pass, keeping only what is reported, so memory grows with the pass size times
  // the vocabulary rather than the prompt length times it.
  const int64_t vocab = model->info().vocab_size;
  nlohmann::json argmax = nlohmann::json::array();
  std::map<int64_t, nlohmann::json> tops;
  std::vector<float> last_logits;
  int64_t done = 0;
  start = std::chrono::steady_clock::now();
  for (int64_t size : UniformPasses(n, options.pass_tokens)) {
    ASSIGN_OR_RETURN(
        std::vector<float> logits,
        model->Forward(slot.get(), absl::MakeConstSpan(options.prompt_ids).subspan(done, size),
                       {.all_logits = true}));
    for (int64_t i = 0; i < size; ++i) {
      const float* row = logits.data() + i * vocab;
      argmax.push_back(Argmax(row, vocab));
      const int64_t p = done + i;
      if (std::find(options.logits_at.begin(), options.logits_at.end(), p) !=
          options.logits_at.end()) {
        tops[p] = TopLogits(row, vocab, options.top);
      }
    }
    last_logits.assign(logits.end() - vocab, logits.end());
    done += size;
  }
  const double prefill_ms = MillisSince(start);

  nlohmann::json out;
  out["model"] = options.model_dir;
  out["architecture"] = model->info().architecture;
  out["weights_digest"] = absl::StrFormat("%016x", model->info().weights_digest);
  out["prompt_tokens"] = n;
  out["argmax"] = argmax;
  nlohmann::json top_list = nlohmann::json::array();
  for (int64_t p : options.logits_at) top_list.push_back({{"position", p}, {"top", tops[p]}});
  out["top"] = top_list;

  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<int32_t> greedy,
                   GreedyDecode(*model, slot.get(), last_logits, options.greedy));
  const double decode_ms = MillisSince(start);
  out["greedy"] = greedy;
  const int decode_passes = std::max(options.greedy - 1, 0);
  out["timings"] = {
      {"load_ms", load_ms},
      {"prefill_ms", prefill_ms},
      {"decode_ms", decode_ms},
      {"prefill_tokens_per_s", prefill_ms > 0 ? n * 1000.0 / prefill_ms : 0.0},
      {"decode_tokens_per_s", decode_ms > 0 ? decode_passes * 1000.0 / decode_ms : 0.0}};
  return out;
}

}  // namespace cairn::infer
