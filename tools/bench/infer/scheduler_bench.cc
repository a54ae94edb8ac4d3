// cairn-scheduler-bench: what batching across slots buys, measured on the scheduler that
// cairn-infer runs (no gRPC, no cache).
//
//   decode     aggregate decode tokens/s with 1 slot and with N slots decoding at once (the
//              batched forward reads the weights once per step for every slot);
//   prefill    the longest gap between two tokens of a decoding stream while another slot
//              prefills a long prompt, against the time of one prefill pass alone: a long
//              prefill must delay other streams by at most one pass.
//   sampling   (--sampling, alone) the scheduler's host time a decode step of N slots over a
//              model whose logits cost nothing (rows of --vocab random logits read in place, as
//              a GPU model's staged download is): the sampling a GPU step waits for, with
//              one sampling thread against the default (SchedulerOptions::sampling_threads).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/concurrency/mutex.h"
#include "common/config/flags.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::bench {
namespace {

using infer::GenerateRequest;
using infer::Scheduler;

// Records when each token arrived. Thread-safe.
class TimingSink final : public infer::RequestSink {
 public:
  struct Shared {
    Mutex mu;
    CondVar cv;
    int finished ABSL_GUARDED_BY(mu) = 0;
  };
  TimingSink(Shared* shared, std::vector<absl::Time>* times) : shared_(shared), times_(times) {}
  void OnStarted(const infer::StartInfo&) override {}
  bool OnToken(const infer::SampledToken&) override {
    times_->push_back(absl::Now());
    return true;
  }
  void OnFinished(const absl::Status&, const infer::FinishInfo&) override {
    MutexLock lock(&shared_->mu);
    ++shared_->finished;
    shared_->cv.SignalAll();
  }
  bool Cancelled() const override { return false; }

 private:
  Shared* shared_;
  std::vector<absl::Time>* times_;
};

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& id : out) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return out;
}

// A model whose forward costs nothing: each sequence's logits are one of kRows fixed rows of
// random logits (picked by the pass's last token), read in place as a GPU model's are.
class InstantLogitsModel final : public infer::Model {
 public:
  static constexpr int kRows = 16;
  explicit InstantLogitsModel(int64_t vocab) : rows_(kRows) {
    info_.architecture = "instant-logits";
    info_.vocab_size = vocab;
    layout_.components.push_back({"layers.0.k", infer::ComponentKind::kRows, 0, 1});
    std::mt19937_64 gen(3);
    for (std::vector<float>& row : rows_) {
      row.resize(static_cast<size_t>(vocab));
      // About a trained model's spread: a few ids far above a broad body.
      for (float& l : row) l = std::normal_distribution<float>(0.0f, 2.5f)(gen);
      for (int i = 0; i < 8; ++i) row[static_cast<size_t>((i * 7919 + gen() % 1000) % vocab)] += 15;
    }
  }
  const infer::ModelInfo& info() const override { return info_; }
  const infer::StateLayout& state_layout() const override { return layout_; }
  absl::Status ForwardBatchInto(absl::Span<const infer::SequencePass> batch,
                                std::vector<std::vector<float>>& results) override {
    results.resize(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) results[i] = RowFor(batch[i]);
    return absl::OkStatus();
  }
  absl::Status ForwardBatchViews(absl::Span<const infer::SequencePass> batch,
                                 std::vector<absl::Span<const float>>& views) override {
    views.resize(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) views[i] = RowFor(batch[i]);
    return absl::OkStatus();
  }

 private:
  const std::vector<float>& RowFor(const infer::SequencePass& pass) const {
    return rows_[static_cast<size_t>(pass.tokens.back()) % kRows];
  }
  infer::ModelInfo info_;
  infer::StateLayout layout_;
  std::vector<std::vector<float>> rows_;
};

struct Setup {
  std::unique_ptr<infer::CpuKernelBackend> backend;
  std::unique_ptr<infer::Model> model;
  std::unique_ptr<infer::SlotKvMemory> memory;
  std::unique_ptr<Scheduler> scheduler;
};

Setup Make(const std::string& dir, int threads, int slots, int64_t context, int64_t max_pass,
           bool pass_invariant) {
  Setup s;
  s.backend = *infer::CpuKernelBackend::Create({.threads = threads});
  infer::ModelLoadOptions lo;
  lo.qwen3_hybrid.pass_invariant = pass_invariant;
  s.model = *infer::LoadModel(dir, s.backend.get(), lo);
  infer::SlotKvMemoryOptions ko;
  ko.slots = slots;
  ko.max_rows = context;
  s.memory = *infer::SlotKvMemory::Create(s.model->state_layout(), ko);
  infer::SchedulerOptions so;
  so.max_pass_tokens = max_pass;
  s.scheduler = std::make_unique<Scheduler>(s.model.get(), s.memory.get(), nullptr, so);
  s.scheduler->Start();
  return s;
}

// Submits one request per prompt at once and waits for all; returns each one's token times.
std::vector<std::vector<absl::Time>> RunAll(Scheduler& scheduler,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            int64_t tokens,
                                            const infer::SamplingOptions& sampling = {}) {
  TimingSink::Shared shared;
  std::vector<std::vector<absl::Time>> times(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.id = absl::StrCat("r", i);
    r.prompt = prompts[i];
    r.max_tokens = tokens;
    r.sampling = sampling;
    r.sink = std::make_unique<TimingSink>(&shared, &times[i]);
    if (!scheduler.Submit(std::move(r)).ok()) std::cerr << "submit failed\n";
  }
  MutexLock lock(&shared.mu);
  while (shared.finished < static_cast<int>(prompts.size())) shared.cv.Wait(&shared.mu);
  return times;
}

// The host's share of a decode step: `slots` requests decoding `tokens` tokens together over
// InstantLogitsModel, greedy, with Qwen's sampling (temperature 0.7, top_p 0.8, top_k 20) and
// with OpenAI's defaults (temperature 1, no other filter), with one sampling thread and with
// the default.
int RunSampling(int slots, int64_t tokens, int64_t vocab) {
  if (vocab < 2 || tokens < 4) {
    std::cerr << "cairn-scheduler-bench: --sampling needs --vocab >= 2, --decode-tokens >= 4\n";
    return 2;
  }
  infer::SamplingOptions qwen;
  qwen.temperature = 0.7f;
  qwen.top_p = 0.8f;
  qwen.top_k = 20;
  qwen.seed = 1;
  infer::SamplingOptions openai;
  openai.temperature = 1.0f;
  openai.seed = 1;
  for (const auto& [name, sampling] : {std::pair<const char*, infer::SamplingOptions>{"greedy", {}},
                                       {"top_k 20", qwen},
                                       {"temp 1", openai}}) {
    for (int threads : {1, 0}) {
      InstantLogitsModel model(vocab);
      absl::StatusOr<std::unique_ptr<infer::SlotKvMemory>> memory = infer::SlotKvMemory::Create(
          model.state_layout(), {.slots = slots, .max_rows = tokens + 16});
      if (!memory.ok()) {
        std::cerr << "cairn-scheduler-bench: " << memory.status() << "\n";
        return 1;
      }
      infer::SchedulerOptions so;
      so.sampling_threads = threads;
      Scheduler scheduler(&model, memory->get(), nullptr, so);
      scheduler.Start();
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < slots; ++i) prompts.push_back(RandomIds(4, vocab, 10 + i));
      auto times = RunAll(scheduler, prompts, tokens, sampling);
      // Steps with every stream decoding: from the last first token to the first last one.
      absl::Time from = absl::InfinitePast(), to = absl::InfiniteFuture();
      for (const auto& t : times) {
        from = std::max(from, t[1]);
        to = std::min(to, t.back());
      }
      int64_t steps = 0;
      for (absl::Time x : times[0]) steps += x > from && x <= to ? 1 : 0;
      scheduler.Shutdown(absl::Now());
      const std::string label =
          absl::StrFormat("sampling: %d slots, vocabulary %d, %-8s %s", slots, vocab, name,
                          threads == 1 ? "one sampling thread  " : "default sampling threads");
      if (steps == 0) {
        std::cout << label << ": no step had every stream decoding (raise --decode-tokens)\n";
        continue;
      }
      std::cout << absl::StrFormat(
          "%s: %.3f ms of host time a decode step\n", label,
          1000.0 * absl::ToDoubleSeconds(to - from) / static_cast<double>(steps));
    }
  }
  return 0;
}

int Run(int argc, char** argv) {
  std::string model, preset = "bench-50m", work_dir, numerics = "fast";
  int threads = 0, slots = 4;
  int64_t decode_tokens = 64, prompt_tokens = 128, long_prompt = 16384, max_pass = 2048;
  FlagSet flags("cairn-scheduler-bench",
                "Aggregate decode throughput with 1 and N slots, and how long a long prefill "
                "delays another slot's stream.");
  flags.Add("model", &model, "model folder (empty: a random model of --preset)");
  flags.Add("preset", &preset, "random-checkpoint preset when --model is empty");
  flags.Add("work-dir", &work_dir, "scratch folder");
  flags.Add("threads", &threads, "backend threads (0: all)");
  flags.Add("slots", &slots, "slots decoding at once");
  flags.Add("decode-tokens", &decode_tokens, "tokens each request generates");
  flags.Add("prompt-tokens", &prompt_tokens, "prompt of each decoding request");
  flags.Add("long-prompt", &long_prompt, "the long prefill's length");
  flags.Add("max-pass-tokens", &max_pass, "longest prefill pass");
  flags.Add("numerics", &numerics, "fast or pass-invariant");
  bool sampling_only = false;
  int64_t vocab_flag = 248320;
  flags.Add("sampling", &sampling_only,
            "measure only the host's time a decode step (a model whose logits cost nothing)");
  flags.Add("vocab", &vocab_flag, "--sampling's vocabulary (Qwen3.5's by default)");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
  if (absl::IsCancelled(rest.status())) {
    std::cout << rest.status().message();
    return 0;
  }
  if (!rest.ok() || !rest->empty() || slots < 2 ||
      (numerics != "fast" && numerics != "pass-invariant")) {
    std::cerr << "cairn-scheduler-bench: bad flags (see --help; --slots >= 2)\n";
    return 2;
  }
  if (sampling_only) return RunSampling(slots, decode_tokens, vocab_flag);
  if (work_dir.empty()) work_dir = absl::StrCat("/tmp/cairn-scheduler-bench-", ::getpid());
  if (model.empty()) {
    model = work_dir + "/model";
    if (!infer::WriteRandomCheckpoint(model, *infer::RandomCheckpointPreset(preset)).ok()) {
      std::cerr << "cannot write the random model\n";
      return 1;
    }
  }
  const int64_t context = long_prompt + decode_tokens + 16;

  // Decode: 1 slot, then N slots at once.
  double single = 0, batched = 0;
  {
    Setup s = Make(model, threads, slots, context, max_pass, numerics == "pass-invariant");
    const int64_t vocab = s.model->info().vocab_size;
    auto one = RunAll(*s.scheduler, {RandomIds(prompt_tokens, vocab, 1)}, decode_tokens);
    single = (decode_tokens - 1) / absl::ToDoubleSeconds(one[0].back() - one[0].front());
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < slots; ++i) prompts.push_back(RandomIds(prompt_tokens, vocab, 10 + i));
    auto many = RunAll(*s.scheduler, prompts, decode_tokens);
    // The window in which every request was decoding (prefills of the others done, none
    // finished), and the tokens each produced in it.
    absl::Time from = absl::InfinitePast(), to = absl::InfiniteFuture();
    for (const auto& t : many) {
      from = std::max(from, t[1]);
      to = std::min(to, t.back());
    }
    int64_t in_window = 0;
    for (const auto& t : many) {
      for (absl::Time x : t) in_window += x > from && x <= to ? 1 : 0;
    }
    batched = static_cast<double>(in_window) / absl::ToDoubleSeconds(to - from);
    s.scheduler->Shutdown(absl::Now());
  }
  std::cout << absl::StrFormat(
      "decode: 1 slot %.1f tokens/s; %d slots %.1f tokens/s aggregate (%.2fx)\n", single, slots,
      batched, batched / single);

  // Prefill interference: one slot decodes while another prefills `long_prompt` tokens.
  {
    Setup s = Make(model, threads, 2, context, max_pass, numerics == "pass-invariant");
    const int64_t vocab = s.model->info().vocab_size;
    // Each pass of the long prompt alone (later passes attend to more rows and take longer).
    double longest_pass_ms = 0;
    {
      infer::SlotKvMemoryOptions ko;
      ko.slots = 1;
      ko.max_rows = context;
      auto alone = *infer::SlotKvMemory::Create(s.model->state_layout(), ko);
      const std::vector<int32_t> tokens = RandomIds(long_prompt, vocab, 6);
      for (int64_t at = 0; at < long_prompt; at += max_pass) {
        const int64_t n = std::min(max_pass, long_prompt - at);
        const absl::Time t0 = absl::Now();
        (void)s.model->Forward(
            alone->slot(0),
            absl::MakeConstSpan(tokens).subspan(static_cast<size_t>(at), static_cast<size_t>(n)),
            {});
        longest_pass_ms = std::max(longest_pass_ms, absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
    }
    TimingSink::Shared shared;
    std::vector<absl::Time> stream, prefill;
    GenerateRequest decoding;
    decoding.prompt = RandomIds(prompt_tokens, vocab, 5);
    decoding.max_tokens = std::max<int64_t>(decode_tokens, 4 * long_prompt / max_pass);
    decoding.sink = std::make_unique<TimingSink>(&shared, &stream);
    GenerateRequest long_request;
    long_request.prompt = RandomIds(long_prompt, vocab, 6);
    long_request.max_tokens = 1;
    long_request.sink = std::make_unique<TimingSink>(&shared, &prefill);
    (void)s.scheduler->Submit(std::move(decoding));
    absl::SleepFor(absl::Milliseconds(200));  // Let the stream start before the long prompt.
    const absl::Time long_start = absl::Now();
    (void)s.scheduler->Submit(std::move(long_request));
    {
      MutexLock lock(&shared.mu);
      while (shared.finished < 2) shared.cv.Wait(&shared.mu);
    }
    double worst = 0;
    for (size_t i = 1; i < stream.size(); ++i) {
      if (stream[i] < long_start) continue;
      worst = std::max(worst, absl::ToDoubleMilliseconds(stream[i] - stream[i - 1]));
    }
    const double prefill_s = absl::ToDoubleSeconds(prefill.front() - long_start);
    const int64_t passes = (long_prompt + max_pass - 1) / max_pass;
    const double mean_pass_ms = 1000.0 * prefill_s / static_cast<double>(passes);
    std::cout << absl::StrFormat(
        "prefill of %d tokens in %d passes: %.1f s (%.0f tokens/s, %.1f ms a pass on average; "
        "the longest pass alone %.1f ms); the decoding stream's longest gap meanwhile %.1f ms "
        "(%.2f times the longest pass)\n",
        long_prompt, passes, prefill_s, static_cast<double>(long_prompt) / prefill_s, mean_pass_ms,
        longest_pass_ms, worst, worst / longest_pass_ms);
    s.scheduler->Shutdown(absl::Now());
  }
  std::filesystem::remove_all(work_dir);
  return 0;
}

}  // namespace
}  // namespace cairn::bench

int main(int argc, char** argv) { return cairn::bench::Run(argc, argv); }
