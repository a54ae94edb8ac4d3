// The sampler's cost a token over Qwen3.5's vocabulary (248,320 logits) on the scheduler
// thread: greedy, sampling without top_k (every id a candidate until the filters), with
// Qwen's top_k 20 (also with penalties), and with a mask allowing every id, against one pass
// reading the logits.
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/infer/engine/sampler.h"

namespace cairn::infer {
namespace {

constexpr int32_t kVocab = 248320;

std::vector<float> RandomLogits() {
  std::mt19937_64 gen(1);
  std::vector<float> logits(kVocab);
  // About the spread of a trained model's logits: a few ids far above a broad body.
  for (float& l : logits) l = std::normal_distribution<float>(0.0f, 2.5f)(gen);
  for (int i = 0; i < 8; ++i) logits[static_cast<size_t>(i) * 7919] = 18.0f - i;
  return logits;
}

// Samples from `logits` with `allowed` (empty: no mask) for as long as the benchmark runs.
void RunOn(benchmark::State& state, const SamplingOptions& o, const std::vector<float>& logits,
           const std::vector<uint64_t>& allowed, const std::vector<int32_t>& prompt = {}) {
  Sampler sampler(o, prompt);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.Sample(logits, allowed).id);
}

// RunOn over RandomLogits, with a mask allowing every id or none.
void Run(benchmark::State& state, const SamplingOptions& o, bool mask,
         const std::vector<int32_t>& prompt = {}) {
  const std::vector<uint64_t> allowed(mask ? (kVocab + 63) / 64 : 0, ~uint64_t{0});
  RunOn(state, o, RandomLogits(), allowed, prompt);
}

void BM_ReadLogits(benchmark::State& state) {
  const std::vector<float> logits = RandomLogits();
  for (auto _ : state) {
    float best = logits[0];
    for (float l : logits) best = l > best ? l : best;
    benchmark::DoNotOptimize(best);
  }
}
BENCHMARK(BM_ReadLogits);

void BM_Greedy(benchmark::State& state) { Run(state, {}, false); }
BENCHMARK(BM_Greedy);

// Qwen's recommended sampling: temperature 0.7, top_p 0.8, top_k 20.
SamplingOptions QwenSampling() {
  SamplingOptions o;
  o.temperature = 0.7f;
  o.top_p = 0.8f;
  o.top_k = 20;
  o.seed = 1;
  return o;
}

void BM_TemperatureNoTopK(benchmark::State& state) {
  SamplingOptions o = QwenSampling();
  o.top_k = 0;
  Run(state, o, false);
}
BENCHMARK(BM_TemperatureNoTopK);

// OpenAI's defaults (temperature 1, top_p 1): every id a candidate, no filter at all.
void BM_TemperatureOnly(benchmark::State& state) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 1;
  Run(state, o, false);
}
BENCHMARK(BM_TemperatureOnly);

// The nucleus's worst case: logits as flat as a random-weight model's, so that top_p 0.95
// keeps most of the vocabulary and it is sorted.
void BM_TemperatureNoTopKFlat(benchmark::State& state) {
  std::vector<float> logits(kVocab);
  std::mt19937_64 gen(3);
  for (float& l : logits) l = std::normal_distribution<float>(0.0f, 0.05f)(gen);
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.95f;
  o.seed = 1;
  RunOn(state, o, logits, {});
}
BENCHMARK(BM_TemperatureNoTopKFlat);

void BM_TemperatureTopK20(benchmark::State& state) { Run(state, QwenSampling(), false); }
BENCHMARK(BM_TemperatureTopK20);

// Qwen's sampling with a repetition and a presence penalty over a 4000-token prompt: the
// penalised ids are valued apart (every generated token joins them as the run goes on).
void BM_TemperatureTopK20Penalties(benchmark::State& state) {
  SamplingOptions o = QwenSampling();
  o.repetition_penalty = 1.05f;
  o.presence_penalty = 1.5f;
  std::vector<int32_t> prompt(4000);
  std::mt19937_64 gen(2);
  for (int32_t& id : prompt) id = static_cast<int32_t>(gen() % kVocab);
  Run(state, o, false, prompt);
}
BENCHMARK(BM_TemperatureTopK20Penalties);

void BM_TemperatureMaskAll(benchmark::State& state) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 1;
  Run(state, o, true);
}
BENCHMARK(BM_TemperatureMaskAll);

// A mask allowing 64 ids spread over the vocabulary (a grammar's structural position).
void BM_TemperatureMaskFew(benchmark::State& state) {
  std::vector<uint64_t> allowed((kVocab + 63) / 64, 0);
  for (int32_t id = 11; id < kVocab; id += kVocab / 64) {
    allowed[id / 64] |= uint64_t{1} << (id % 64);
  }
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 1;
  RunOn(state, o, RandomLogits(), allowed);
}
BENCHMARK(BM_TemperatureMaskFew);

}  // namespace
}  // namespace cairn::infer
