// cairn-cpu-bench: how close the CPU backend runs to this machine's limits, all measured in one
// run (docs/cpu-backend.md):
//
//   memory     STREAM-like copy and read bandwidth over arrays far larger than the caches,
//              on the backend's thread count;
//   resident   the process's resident memory added by loading the model, against the size of
//              its safetensors files;
//   decode     tokens/s with 1 and N slots decoding at once (one batched pass per step), and
//              the weight bytes read per second as a share of the read bandwidth;
//   prefill    tokens/s for prompts of the given lengths (in passes of --max-pass-tokens) and
//              where the time goes (GEMMs, attention, delta rule, other operations, outside the
//              backend); the target's measure: the pass's model FLOPs (the linear layers,
//              attention's causal products, the chunked delta rule's products) per second, as a
//              share of cblas_sgemm's rate on the same FLOP-weighted mix of shapes; and the old
//              measure beside it: the linear layers' FLOPs over the pass's time, as a share of
//              cblas_sgemm (and cblas_sbgemm, where OpenBLAS has it) on their shapes only.
//
//   cairn-cpu-bench --preset bench-500m [--threads 0] [--slots 4] [--prefill 512,2048,8192]

#include <cblas.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config/flags.h"
#include "common/status/status_macros.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/cpu/pass_flops.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "services/infer/models/safetensors.h"

namespace cairn::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

// The processor time this process has used (every thread, user and system), in seconds. On a
// machine shared with other work a rate per processor-second moves far less than a rate per
// wall-clock second: the time other work takes the cores from this process is not counted.
double CpuSeconds() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Processor seconds the hypervisor has taken from this machine's processors since boot (the
// "steal" field of /proc/stat; a virtual machine's host running other guests), or -1 where that
// is not available. A measurement that loses a core to it reads slow without any fault of its
// own, so the bench prints it beside the measurements it overlapped.
double StealSeconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = -1;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu" || steal < 0) {
    return -1;
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(steal) / static_cast<double>(ticks) : -1;
}

// "; the hypervisor took X processor-seconds (steal) in those Y s" for a span that began at
// `steal0` (StealSeconds()), or nothing where steal time is not reported.
std::string StealNote(double steal0, double span_s) {
  const double steal1 = StealSeconds();
  if (steal0 < 0 || steal1 < 0) return "";
  return absl::StrFormat("; the hypervisor took %.2f processor-seconds (steal) in those %.2f s",
                         steal1 - steal0, span_s);
}

// Wall-clock and processor seconds of one or more runs.
struct Timing {
  double wall_s = 0;
  double cpu_s = 0;
};

// The smallest of `reps` timings of `fn`, wall-clock and processor time each.
Timing BestOfTimed(int reps, const std::function<void()>& fn) {
  Timing best{1e300, 1e300};
  for (int i = 0; i < reps; ++i) {
    const double c0 = CpuSeconds();
    const Clock::time_point t0 = Clock::now();
    fn();
    best.wall_s = std::min(best.wall_s, Seconds(t0));
    best.cpu_s = std::min(best.cpu_s, CpuSeconds() - c0);
  }
  return best;
}

// The smallest of `reps` timings of `fn`, in seconds.
double BestOf(int reps, const std::function<void()>& fn) { return BestOfTimed(reps, fn).wall_s; }

// Resident set size of this process in bytes (VmRSS), or 0 when unreadable.
int64_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    int64_t kb = 0;
    std::string digits;
    for (char ch : line) {
      if (ch >= '0' && ch <= '9') digits += ch;
    }
    return absl::SimpleAtoi(digits, &kb) ? kb * 1024 : 0;
  }
  return 0;
}

// The 1-minute load average (/proc/loadavg): how much else this machine was running.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "?" : one;
}

// Runs fn(begin, end) over [0, n) split into `threads` contiguous parts, one thread each.
// Runs fn(begin, end) over [0, n) in chunks of kSplitChunk taken in turn by `threads` threads
// (a thread the machine delays takes fewer, as the backend's own loops do).
constexpr int64_t kSplitChunk = int64_t{1} << 18;
void Split(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      for (int64_t at = next.fetch_add(kSplitChunk); at < n; at = next.fetch_add(kSplitChunk)) {
        fn(at, std::min(n, at + kSplitChunk));
      }
    });
  }
  for (std::thread& w : workers) w.join();
}

// Sum of a[0, n) with four independent 8-lane sums: bound by loads, not by adds.
__attribute__((target("avx2"))) double SumAvx2(const float* a, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  double total = 0;
  for (float x : v) total += x;
  for (; i < n; ++i) total += a[i];
  return total;
}

double SumFloats(const float* a, int64_t n) {
  if (__builtin_cpu_supports("avx2")) return SumAvx2(a, n);
  float s[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j];
  }
  double total = 0;
  for (float x : s) total += x;
  return total;
}

struct Bandwidth {
  double copy_gbs = 0;  // Bytes read plus bytes written, as STREAM counts them.
  double read_gbs = 0;
  double read_cpu_gbs = 0;  // Bytes read per processor-second (all threads together).
};

Bandwidth MeasureBandwidth(int64_t bytes, int threads) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 2.0f);
  std::vector<double> sums(static_cast<size_t>(n / kSplitChunk + 1));
  Bandwidth out;
  const double copy_s = BestOf(5, [&] {
    Split(n, threads, [&](int64_t from, int64_t to) {
      std::memcpy(b.data() + from, a.data() + from, static_cast<size_t>(to - from) * 4);
    });
  });
  out.copy_gbs = 2.0 * static_cast<double>(n) * 4 / copy_s / 1e9;
  const Timing read = BestOfTimed(5, [&] {
    Split(n, threads, [&](int64_t from, int64_t to) {
      const double total = SumFloats(a.data() + from, to - from);
      sums[static_cast<size_t>(from / kSplitChunk)] = total;
    });
  });
  out.read_gbs = static_cast<double>(n) * 4 / read.wall_s / 1e9;
  out.read_cpu_gbs = static_cast<double>(n) * 4 / read.cpu_s / 1e9;
  std::cerr << "(bandwidth checksum " << sums[0] << ")\n";
  return out;
}

// The linear layers' weight shapes [rows, cols] of a prefill pass: every 2-D tensor but the
// embedding and the LM head (a prefill pass computes logits for its last token only).
std::vector<std::pair<int64_t, int64_t>> LinearShapes(const infer::TensorStore& store) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto& [name, t] : store.tensors()) {
    if (t->shape.size() != 2) continue;
    if (name.find("embed_tokens") != std::string::npos || name == "lm_head.weight") continue;
    shapes.emplace_back(t->shape[0], t->shape[1]);
  }
  return shapes;
}

// cblas_sbgemm and the fp32 -> bf16 conversion, looked up at run time: OpenBLAS declares them
// in every build but defines them only when built with BUILD_BFLOAT16 (Debian 12's is not).
using SbgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                          float, const bfloat16*, blasint, const bfloat16*, blasint, float, float*,
                          blasint);
using ToBf16Fn = void (*)(blasint, const float*, blasint, bfloat16*, blasint);
struct Sbgemm {
  SbgemmFn gemm = nullptr;
  ToBf16Fn to_bf16 = nullptr;
};
Sbgemm FindSbgemm() {
  Sbgemm s;
  s.gemm = reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  s.to_bf16 = reinterpret_cast<ToBf16Fn>(dlsym(RTLD_DEFAULT, "cblas_sbstobf16"));
  if (s.to_bf16 == nullptr) s.gemm = nullptr;
  return s;
}

// ", row tiles (prefetch ...)" for the model line, or nothing without row tiles.
std::string RowTilesNote(const infer::CpuKernelBackend& backend) {
  if (!backend.TakesRowTiles(infer::WeightType::kBF16)) return "";
  const int64_t bytes = backend.tile_prefetch_min_input_bytes();
  if (bytes == infer::cpu::kTilePrefetchNever) return ", row tiles, no prefetch";
  if (bytes == infer::cpu::kTilePrefetchAlways) return ", row tiles, prefetch always";
  return absl::StrFormat(", row tiles, prefetch from %d-byte input rows", bytes);
}

// Inputs of one timed product y[m, n] = x[m, k] . b (b is [n, k] when transposed, else [k, n]).
struct ProductInputs {
  std::vector<float> x, b, y;
  ProductInputs(int64_t m, int64_t n, int64_t k)
      : x(static_cast<size_t>(m * k)),
        b(static_cast<size_t>(n * k)),
        y(static_cast<size_t>(m * n)) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.1f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.01f;
  }
};

// The best of `reps` timings of cblas_sgemm on one product of the shape of `p`, on
// `blas_threads` OpenBLAS threads.
Timing TimeSgemm(const infer::cpu::PassProduct& p, int reps, int blas_threads) {
  const int backend_blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(blas_threads);
  ProductInputs in(p.m, p.n, p.k);
  const Timing t = BestOfTimed(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, p.transposed_b ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(p.m), static_cast<blasint>(p.n), static_cast<blasint>(p.k),
                1.0f, in.x.data(), static_cast<blasint>(p.k), in.b.data(),
                static_cast<blasint>(p.transposed_b ? p.k : p.n), 0.0f, in.y.data(),
                static_cast<blasint>(p.n));
  });
  openblas_set_num_threads(backend_blas_threads);
  return t;
}

// The wall-clock time cblas_sbgemm (bf16 inputs), on `threads` OpenBLAS threads, takes for the
// linear products of `products`, each distinct shape timed once (best of `reps`) and counted as
// often as it occurs; 0 when this OpenBLAS has no sbgemm.
double TimeSbgemm(const std::vector<infer::cpu::PassProduct>& products, int reps, int threads) {
  const Sbgemm sb = FindSbgemm();
  if (sb.gemm == nullptr) return 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> count;
  for (const infer::cpu::PassProduct& p : products) {
    if (p.part == infer::cpu::PassPart::kLinear) ++count[{p.m, p.n, p.k}];
  }
  const int backend_blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  double total = 0;
  for (const auto& [shape, times] : count) {
    const auto [m, n, k] = shape;
    ProductInputs in(m, n, k);
    std::vector<bfloat16> xb(in.x.size()), wb(in.b.size());
    sb.to_bf16(static_cast<blasint>(in.x.size()), in.x.data(), 1, xb.data(), 1);
    sb.to_bf16(static_cast<blasint>(in.b.size()), in.b.data(), 1, wb.data(), 1);
    total += times * BestOf(reps, [&, m = m, n = n, k = k] {
               sb.gemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                       static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, xb.data(),
                       static_cast<blasint>(k), wb.data(), static_cast<blasint>(k), 0.0f,
                       in.y.data(), static_cast<blasint>(n));
             });
  }
  openblas_set_num_threads(backend_blas_threads);
  return total;
}

// One part of a prefill pass (the linear layers, attention or the delta rule) against sgemm:
// the model FLOPs it counts, the FLOPs of the shapes sgemm was timed on, and the time sgemm
// takes for the model FLOPs at its rate on those shapes (wall clock and processor time).
struct PartReference {
  double model_flops = 0;
  double shape_flops = 0;
  double sgemm_s = 0;
  double sgemm_cpu_s = 0;
};

// sgemm on the FLOP-weighted mix of a pass's products (infer::cpu::PassProduct), per part.
// Each distinct shape is timed once (best of `reps`); the time sgemm takes for a product's
// model FLOPs is those FLOPs at sgemm's rate on the product's whole shape, so a product that
// stands for a causal triangle costs the triangle's share of the shape's time. The linear
// layers' shapes run on `threads` OpenBLAS threads (OpenBLAS's own split of a wide product);
// attention's and the delta rule's run on one thread, as the backend runs them (spread over
// its threads), and count as `threads` threads sharing them perfectly (OpenBLAS's own threads
// split such small products poorly: a reference that easy would flatter). Processor time is
// the sum over threads either way.
struct MixReference {
  PartReference parts[3];  // Indexed by PassPart.
  double model_flops() const {
    return parts[0].model_flops + parts[1].model_flops + parts[2].model_flops;
  }
  double sgemm_s() const { return parts[0].sgemm_s + parts[1].sgemm_s + parts[2].sgemm_s; }
  double sgemm_cpu_s() const {
    return parts[0].sgemm_cpu_s + parts[1].sgemm_cpu_s + parts[2].sgemm_cpu_s;
  }
};
MixReference TimeMix(const std::vector<infer::cpu::PassProduct>& products, int reps, int threads) {
  using Key = std::tuple<infer::cpu::PassPart, int64_t, int64_t, int64_t, bool>;
  struct Occurrences {
    double times = 0;
    double model_flops = 0;
  };
  std::map<Key, Occurrences> shapes;
  for (const infer::cpu::PassProduct& p : products) {
    Occurrences& o = shapes[{p.part, p.m, p.n, p.k, p.transposed_b}];
    o.times += 1;
    o.model_flops += p.model_flops;
  }
  MixReference out;
  for (const auto& [key, o] : shapes) {
    const auto [part, m, n, k, transposed] = key;
    const infer::cpu::PassProduct p{part, m, n, k, transposed, 0};
    const bool linear = part == infer::cpu::PassPart::kLinear;
    const Timing t = TimeSgemm(p, reps, linear ? threads : 1);
    const double shape_flops = infer::cpu::ShapeFlops(p);
    PartReference& r = out.parts[static_cast<int>(part)];
    r.model_flops += o.model_flops;
    r.shape_flops += o.times * shape_flops;
    r.sgemm_s += o.model_flops / shape_flops * t.wall_s / (linear ? 1 : threads);
    r.sgemm_cpu_s += o.model_flops / shape_flops * t.cpu_s;
  }
  return out;
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, int64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + seed * 104729 + 17) % vocab);
  }
  return t;
}

// The first index of the largest element (as std::max_element), with the running maximum in a
// register: std::max_element keeps an iterator to it and reloads the value every step, which
// took 3-4 % of a four-slot decode step of the small model in this bench's own loop.
int32_t Argmax(absl::Span<const float> v) {
  int32_t best = 0;
  float top = v[0];
  for (size_t i = 1; i < v.size(); ++i) {
    if (top < v[i]) {
      top = v[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// `slots` sequences decoding together, each prefilled with a prompt; Step() runs one batched
// decode step for all of them.
class DecodeSet {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeSet>> Create(infer::Model& model, int slots,
                                                           int64_t prompt, int64_t max_steps) {
    auto set = std::unique_ptr<DecodeSet>(new DecodeSet(model));
    const int64_t vocab = model.info().vocab_size;
    for (int i = 0; i < slots; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<infer::SlotState> slot,
                       infer::SlotState::Create(model.state_layout(), prompt + max_steps + 8));
      ASSIGN_OR_RETURN(std::vector<float> logits,
                       model.Forward(slot.get(), Tokens(prompt, vocab, i), {}));
      set->next_.push_back(Argmax(logits));
      set->slots_.push_back(std::move(slot));
    }
    return set;
  }

  absl::Status Step() {
    std::vector<infer::SequencePass> batch;
    for (size_t i = 0; i < slots_.size(); ++i) {
      batch.push_back({slots_[i].get(), absl::MakeConstSpan(&next_[i], 1), false});
    }
    // Read in place, as cairn-infer's scheduler decodes.
    RETURN_IF_ERROR(model_.ForwardBatchViews(batch, logits_));
    for (size_t i = 0; i < slots_.size(); ++i) next_[i] = Argmax(logits_[i]);
    return absl::OkStatus();
  }

  int slots() const { return static_cast<int>(slots_.size()); }

 private:
  explicit DecodeSet(infer::Model& model) : model_(model) {}

  infer::Model& model_;
  std::vector<std::unique_ptr<infer::SlotState>> slots_;
  std::vector<int32_t> next_;
  std::vector<absl::Span<const float>> logits_;  // The last step's, until the next.
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double KernelSeconds(const infer::CpuKernelProfile& p) {
  return p.matmul_s + p.matmul_rows_s + p.attention_s + p.delta_rule_s + p.other_s;
}

void Add(const infer::CpuKernelProfile& p, infer::CpuKernelProfile& sum) {
  sum.matmul_s += p.matmul_s;
  sum.matmul_rows_s += p.matmul_rows_s;
  sum.attention_s += p.attention_s;
  sum.delta_rule_s += p.delta_rule_s;
  sum.other_s += p.other_s;
}

// Where `elapsed` seconds went, as shares of it: the backend's kinds of operation (`p`) and
// the rest (outside the backend).
std::string Shares(const infer::CpuKernelProfile& p, double elapsed) {
  return absl::StrFormat(
      "GEMMs %.1f%%, row products %.1f%%, attention %.1f%%, delta rule %.1f%%, other kernels "
      "%.1f%%, outside the backend %.1f%%",
      100 * p.matmul_s / elapsed, 100 * p.matmul_rows_s / elapsed, 100 * p.attention_s / elapsed,
      100 * p.delta_rule_s / elapsed, 100 * p.other_s / elapsed,
      100 * (elapsed - KernelSeconds(p)) / elapsed);
}

// Shares() of wall-clock time and of processor time.
std::string BothShares(const infer::CpuKernelProfile& wall, double elapsed,
                       const infer::CpuKernelProfile& cpu, double elapsed_cpu) {
  auto busy = [](double cpu_s, double wall_s) { return wall_s > 0 ? cpu_s / wall_s : 0.0; };
  return absl::StrCat(
      "time in ", Shares(wall, elapsed), "; processor time in ", Shares(cpu, elapsed_cpu),
      absl::StrFormat("; processors busy (processor over wall seconds): GEMMs %.2f, attention "
                      "%.2f, delta rule %.2f, other kernels %.2f, outside the backend %.2f, "
                      "all %.2f",
                      busy(cpu.matmul_s, wall.matmul_s), busy(cpu.attention_s, wall.attention_s),
                      busy(cpu.delta_rule_s, wall.delta_rule_s), busy(cpu.other_s, wall.other_s),
                      busy(elapsed_cpu - KernelSeconds(cpu), elapsed - KernelSeconds(wall)),
                      busy(elapsed_cpu, elapsed)));
}

int64_t FileBytes(const std::vector<std::string>& files) {
  int64_t total = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    total += static_cast<int64_t>(std::filesystem::file_size(f, ec));
  }
  return total;
}

// OpenBLAS's own worker threads, woken by the reference sgemm calls on several threads, spin
// (sched_yield) for a while before they sleep (THREAD_TIMEOUT, 2^28 cycles by default: about a
// tenth of a second); a prefill timed meanwhile shares the cores with them, which the backend
// (OpenBLAS on one thread) never does in service. Waiting this long before a timed prefill lets
// them sleep first.
constexpr absl::Duration kBlasWorkersSettle = absl::Milliseconds(500);

void LetBlasWorkersSleep() { absl::SleepFor(kBlasWorkersSettle); }

// Seconds of one prompt's prefill in passes of at most `max_pass` tokens from an empty slot,
// and the last pass's logits.
absl::StatusOr<double> TimePrefill(infer::Model& model, infer::SlotState* slot,
                                   const std::vector<int32_t>& tokens, int64_t max_pass,
                                   std::vector<float>* logits) {
  RETURN_IF_ERROR(slot->Reset());
  const Clock::time_point t0 = Clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t at = 0; at < n; at += max_pass) {
    const int64_t len = std::min(max_pass, n - at);
    ASSIGN_OR_RETURN(*logits, model.Forward(slot,
                                            absl::MakeConstSpan(tokens).subspan(
                                                static_cast<size_t>(at), static_cast<size_t>(len)),
                                            {}));
  }
  return Seconds(t0);
}

// --compare-gemm-split: `model` (on a backend of options.gemm_split) against a second copy on a
// backend of `other_split`, prefilling each prompt alternately `alternations` times, so that
// each pair of times shares the machine's load; prints the median of the pairs' ratios.
absl::Status CompareGemmSplit(const std::string& model_dir,
                              const infer::CpuKernelBackendOptions& options,
                              const std::string& other_split, infer::Model& model,
                              const std::vector<int64_t>& prefill, int64_t max_pass,
                              int alternations) {
  infer::CpuKernelBackendOptions other_options = options;
  other_options.gemm_split = other_split;
  other_options.profile = false;
  ASSIGN_OR_RETURN(std::unique_ptr<infer::CpuKernelBackend> other_backend,
                   infer::CpuKernelBackend::Create(other_options));
  ASSIGN_OR_RETURN(std::unique_ptr<infer::Model> other,
                   infer::LoadModel(model_dir, other_backend.get(), {}));
  for (int64_t n : prefill) {
    ASSIGN_OR_RETURN(std::unique_ptr<infer::SlotState> slot,
                     infer::SlotState::Create(model.state_layout(), n));
    const std::vector<int32_t> tokens = Tokens(n, model.info().vocab_size, 99);
    std::vector<double> mine, theirs, ratios;
    std::vector<float> logits, other_logits;
    LetBlasWorkersSleep();
    for (int i = 0; i < alternations; ++i) {
      // In the order A B, B A, A B, ... so that neither always runs first.
      double a = 0, b = 0;
      for (int which = 0; which < 2; ++which) {
        if ((which == 0) == (i % 2 == 0)) {
          ASSIGN_OR_RETURN(a, TimePrefill(model, slot.get(), tokens, max_pass, &logits));
        } else {
          ASSIGN_OR_RETURN(b, TimePrefill(*other, slot.get(), tokens, max_pass, &other_logits));
        }
      }
      mine.push_back(a);
      theirs.push_back(b);
      ratios.push_back(b / a);
    }
    float largest = 0, diff = 0;
    for (size_t i = 0; i < logits.size() && i < other_logits.size(); ++i) {
      largest = std::max(largest, std::abs(logits[i]));
      diff = std::max(diff, std::abs(logits[i] - other_logits[i]));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[(v.size() - 1) / 2];
    };
    std::cout << absl::StrFormat(
        "prefill %d tokens, GEMMs split by %s against %s, %d alternations: %.3f s against %.3f s "
        "(medians); %s / %s time per pair: median %.3f, range %.3f-%.3f; last logits differ by "
        "%.2g of the largest\n",
        n, options.gemm_split, other_options.gemm_split, alternations, median(mine), median(theirs),
        other_options.gemm_split, options.gemm_split, median(ratios),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()), largest > 0 ? diff / largest : diff);
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::string model_dir, preset = "bench-50m", work_dir;
  std::vector<std::string> prefill_flag = {"512", "2048", "8192"};
  int threads = 0, spin_us = infer::kServingCpuSpinMicros, slots = 4, decode_steps = 40,
      decode_rounds = 5, gemm_reps = 2, prefill_rounds = 1, compare_rounds = 9;
  std::string compare_gemm_split;
  int64_t decode_prompt = 128, max_pass = 2048;
  uint64_t bandwidth_bytes = uint64_t{1} << 30;
  FlagSet flags("cairn-cpu-bench",
                "CPU backend decode and prefill rates against the machine's memory bandwidth "
                "and GEMM rate, measured in the same run.");
  flags.Add("model", &model_dir, "model folder (empty: a random model of --preset)");
  flags.Add("preset", &preset, "random-checkpoint preset when --model is empty");
  flags.Add("work-dir", &work_dir, "scratch folder");
  flags.Add("threads", &threads, "backend threads (0: one per hardware thread)");
  flags.Add("spin-us", &spin_us,
            "microseconds a backend helper thread watches for the next loop before sleeping (the "
            "serving programs' default)");
  bool row_tiles = infer::CpuKernelBackendOptions().row_tiles;
  flags.Add("row-tiles", &row_tiles,
            "pack bf16 / f16 matrices into row tiles at load time (false: read them row-major "
            "where the checkpoint maps them)");
  std::string gemm_split = infer::CpuKernelBackendOptions().gemm_split;
  flags.Add("gemm-split", &gemm_split,
            "how a prefill GEMM is spread over the threads: rows (blocks of input rows, weights "
            "widened once per chunk) or weights (tiles of weight rows, the input packed per tile)");
  std::string tile_prefetch = infer::CpuKernelBackendOptions().tile_prefetch;
  flags.Add("tile-prefetch", &tile_prefetch,
            "when the row kernel asks for row-tile weights ahead: auto, always, never, or the "
            "input rows' size in bytes from which on");
  flags.Add("slots", &slots, "slots of the batched decode measurement");
  flags.Add("decode-steps", &decode_steps, "decode steps per measurement (1 slot and N slots)");
  flags.Add("decode-rounds", &decode_rounds, "rounds the decode steps are split into");
  flags.Add("decode-prompt", &decode_prompt, "prompt tokens before decoding");
  flags.Add("prefill", &prefill_flag, "prompt lengths of the prefill measurements");
  flags.Add("max-pass-tokens", &max_pass, "longest prefill pass (as cairn-infer's scheduler)");
  flags.Add("compare-gemm-split", &compare_gemm_split,
            "after the prefill measurements, prefill each prompt alternately with this model and "
            "a second copy on a backend of this --gemm-split (empty: no comparison), for a paired "
            "comparison on a machine whose speed drifts");
  flags.Add("compare-rounds", &compare_rounds, "alternations of --compare-gemm-split");
  flags.Add("prefill-rounds", &prefill_rounds,
            "rounds of (prefill, sgemm on its mix) per prompt length; the median ratio counts");
  flags.Add("gemm-reps", &gemm_reps, "timings per GEMM shape (the best counts)");
  flags.AddBytes("bandwidth-bytes", &bandwidth_bytes, "size of each bandwidth array");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
  if (absl::IsCancelled(rest.status())) {
    std::cout << rest.status().message();
    return absl::OkStatus();
  }
  if (!rest.ok()) return rest.status();
  std::vector<int64_t> prefill;
  for (const std::string& p : prefill_flag) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(p, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad --prefill length '", p, "'"));
    }
    prefill.push_back(n);
  }
  if (slots < 1 || decode_steps < 2 || max_pass < 1 || gemm_reps < 1 || threads < 0 ||
      decode_rounds < 1 || prefill_rounds < 1 || compare_rounds < 1) {
    return absl::InvalidArgumentError(
        "--slots, --max-pass-tokens, --gemm-reps, --decode-rounds, --prefill-rounds must be >= "
        "1, --decode-steps >= 2, --threads >= 0, --compare-rounds >= 1");
  }
  if (!compare_gemm_split.empty() && compare_gemm_split != "auto" && compare_gemm_split != "rows" &&
      compare_gemm_split != "weights") {
    return absl::InvalidArgumentError(absl::StrCat("--compare-gemm-split '", compare_gemm_split,
                                                   "' is not auto, rows or weights"));
  }
  if (work_dir.empty()) work_dir = absl::StrCat("/tmp/cairn-cpu-bench-", ::getpid());
  if (model_dir.empty()) {
    model_dir = work_dir + "/model";
    ASSIGN_OR_RETURN(infer::RandomCheckpointOptions options, infer::RandomCheckpointPreset(preset));
    RETURN_IF_ERROR(infer::WriteRandomCheckpoint(model_dir, options));
  }

  infer::CpuKernelBackendOptions backend_options;
  backend_options.threads = threads;
  backend_options.spin_us = spin_us;
  backend_options.row_tiles = row_tiles;
  backend_options.tile_prefetch = tile_prefetch;
  backend_options.gemm_split = gemm_split;
  backend_options.profile = true;
  ASSIGN_OR_RETURN(std::unique_ptr<infer::CpuKernelBackend> backend,
                   infer::CpuKernelBackend::Create(backend_options));
  const Bandwidth bw = MeasureBandwidth(static_cast<int64_t>(bandwidth_bytes), backend->threads());
  std::cout << absl::StrFormat(
      "machine: %d threads, load average %s; memory copy %.1f GB/s, read %.1f GB/s\n",
      backend->threads(), LoadAverage(), bw.copy_gbs, bw.read_gbs);

  ASSIGN_OR_RETURN(std::unique_ptr<infer::TensorStore> store, infer::TensorStore::Open(model_dir));
  const int64_t file_bytes = FileBytes(store->files());
  const std::vector<std::pair<int64_t, int64_t>> shapes = LinearShapes(*store);
  store.reset();

  const int64_t rss_before = ResidentBytes();
  const Clock::time_point load_start = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<infer::Model> model,
                   infer::LoadModel(model_dir, backend.get(), {}));
  const double load_s = Seconds(load_start);
  std::cout << absl::StrFormat(
      "model: %s, %.1fM parameters, %.1f MB of weights in memory, files %.1f MB; backend %s "
      "(isa %s%s, GEMMs split by %s); loaded in %.2f s\n",
      model->info().architecture, model->info().num_parameters / 1e6,
      model->info().weight_bytes / 1e6, file_bytes / 1e6, backend->name(),
      infer::cpu::IsaName(backend->isa()), RowTilesNote(*backend), gemm_split, load_s);

  // Decode: rounds of (read bandwidth, `steps` steps of 1 slot, `steps` steps of N slots), so
  // that on a shared machine all three see the same load; the medians over the rounds count.
  {
    const int steps = std::max(1, decode_steps / decode_rounds);
    ASSIGN_OR_RETURN(std::unique_ptr<DecodeSet> one,
                     DecodeSet::Create(*model, 1, decode_prompt, decode_steps + 1));
    ASSIGN_OR_RETURN(std::unique_ptr<DecodeSet> many,
                     DecodeSet::Create(*model, slots, decode_prompt, decode_steps + 1));
    RETURN_IF_ERROR(one->Step());  // Warm-up: page in the weights.
    RETURN_IF_ERROR(many->Step());
    std::vector<double> read_gbs, read_cpu_gbs, rate[2], cpu_rate[2];
    double elapsed_s[2] = {0, 0};
    infer::CpuKernelProfile spent[2];
    const double decode_steal0 = StealSeconds();
    const Clock::time_point decode_t0 = Clock::now();
    for (int round = 0; round < decode_rounds; ++round) {
      const Bandwidth round_bw =
          MeasureBandwidth(static_cast<int64_t>(bandwidth_bytes) / 4, backend->threads());
      read_gbs.push_back(round_bw.read_gbs);
      read_cpu_gbs.push_back(round_bw.read_cpu_gbs);
      for (int which = 0; which < 2; ++which) {
        DecodeSet& set = which == 0 ? *one : *many;
        backend->ResetProfile();
        const double c0 = CpuSeconds();
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(set.Step());
        const double round_s = Seconds(t0);
        rate[which].push_back(steps / round_s);  // Steps per second.
        cpu_rate[which].push_back(steps / std::max(1e-9, CpuSeconds() - c0));
        elapsed_s[which] += round_s;
        Add(backend->profile(), spent[which]);
      }
    }
    const double read = Median(read_gbs);
    const double read_cpu = Median(read_cpu_gbs);
    std::cout << absl::StrFormat(
        "decode: %d rounds of %d steps; read bandwidth %.1f GB/s, %.1f GB/s per processor-second "
        "(medians)%s\n",
        decode_rounds, steps, read, read_cpu, StealNote(decode_steal0, Seconds(decode_t0)));
    for (int which = 0; which < 2; ++which) {
      const double steps_per_s = Median(rate[which]);
      const double weight_gbs = steps_per_s * static_cast<double>(model->info().weight_bytes) / 1e9;
      const double weight_cpu_gbs =
          Median(cpu_rate[which]) * static_cast<double>(model->info().weight_bytes) / 1e9;
      const int n = which == 0 ? 1 : slots;
      std::cout << absl::StrFormat(
          "decode, %d slot(s): %.1f tokens/s; weights read at %.2f GB/s = %.0f%% of the read "
          "bandwidth; per processor-second %.2f GB/s = %.0f%% of the read loop's; %s\n",
          n, n * steps_per_s, weight_gbs, 100 * weight_gbs / read, weight_cpu_gbs,
          100 * weight_cpu_gbs / read_cpu, "time in " + Shares(spent[which], elapsed_s[which]));
    }
  }
  // After decoding every weight has been read: the model's resident share is its working set.
  const int64_t resident = ResidentBytes() - rss_before;
  std::cout << absl::StrFormat(
      "resident memory added by the model and %d decoding slots: %.1f MB (%.2fx the files)\n",
      slots, resident / 1e6, static_cast<double>(resident) / static_cast<double>(file_bytes));

  // A prefill pass makes few backend calls, each long: the processor-time split costs little.
  backend->ProfileProcessorTime(true);
  for (int64_t n : prefill) {
    ASSIGN_OR_RETURN(std::unique_ptr<infer::SlotState> slot,
                     infer::SlotState::Create(model->state_layout(), n));
    const std::vector<int32_t> tokens = Tokens(n, model->info().vocab_size, 99);
    // Rounds of (the prompt's passes, sgemm on their mix), so that on a shared machine each
    // ratio compares two measurements taken under the same load; the round with the median
    // ratio is reported (of an even count, the lower of the middle two).
    struct Round {
      double elapsed = 0, elapsed_cpu = 0;
      double steal0 = -1;  // StealSeconds() at the start of the passes.
      std::string steal;   // StealNote() of the passes.
      infer::CpuKernelProfile p, p_cpu;
      std::vector<int64_t> passes;
      std::vector<infer::cpu::PassProduct> products;
      MixReference mix;
      double ratio() const { return mix.sgemm_s() / elapsed; }
    };
    std::vector<Round> rounds;
    for (int round = 0; round < prefill_rounds; ++round) {
      Round& r = rounds.emplace_back();
      RETURN_IF_ERROR(slot->Reset());
      LetBlasWorkersSleep();
      backend->ResetProfile();
      const double c0 = CpuSeconds();
      r.steal0 = StealSeconds();
      const Clock::time_point t0 = Clock::now();
      for (int64_t at = 0; at < n; at += max_pass) {
        const int64_t len = std::min(max_pass, n - at);
        r.passes.push_back(len);
        RETURN_IF_ERROR(model
                            ->Forward(slot.get(),
                                      absl::MakeConstSpan(tokens).subspan(static_cast<size_t>(at),
                                                                          static_cast<size_t>(len)),
                                      {})
                            .status());
      }
      r.elapsed = Seconds(t0);
      r.elapsed_cpu = CpuSeconds() - c0;
      r.steal = StealNote(r.steal0, r.elapsed);
      r.p = backend->profile();
      r.p_cpu = backend->cpu_profile();
      // The pass's products: the linear layers of every pass, and attention's and the delta
      // rule's as the backend recorded its calls.
      for (int64_t len : r.passes) {
        const std::vector<infer::cpu::PassProduct> pass =
            infer::cpu::LinearPassProducts(shapes, len);
        r.products.insert(r.products.end(), pass.begin(), pass.end());
      }
      for (const infer::CpuAttentionCall& c : backend->attention_calls()) {
        const std::vector<infer::cpu::PassProduct> head =
            infer::cpu::AttentionPassProducts(c.tokens, c.past, c.head_dim);
        for (int h = 0; h < c.q_heads; ++h) {
          r.products.insert(r.products.end(), head.begin(), head.end());
        }
      }
      for (const infer::CpuDeltaRuleCall& c : backend->delta_rule_calls()) {
        const std::vector<infer::cpu::PassProduct> head =
            infer::cpu::DeltaRulePassProducts(c.tokens, c.dk, c.dv, c.chunk);
        for (int h = 0; h < c.v_heads; ++h) {
          r.products.insert(r.products.end(), head.begin(), head.end());
        }
      }
      r.mix = TimeMix(r.products, gemm_reps, backend->threads());
    }
    std::vector<const Round*> by_ratio;
    for (const Round& r : rounds) by_ratio.push_back(&r);
    std::sort(by_ratio.begin(), by_ratio.end(),
              [](const Round* a, const Round* b) { return a->ratio() < b->ratio(); });
    // The lower middle one for an even count: never the better of two.
    const Round& median = *by_ratio[(by_ratio.size() - 1) / 2];
    std::string spread;
    if (rounds.size() > 1) {
      spread = absl::StrCat("; round with the median ratio of ", rounds.size(), ", ratios");
      for (const Round* r : by_ratio)
        absl::StrAppend(&spread, absl::StrFormat(" %.0f%%", 100 * r->ratio()));
    }
    const double elapsed = median.elapsed;
    const double elapsed_cpu = median.elapsed_cpu;
    const infer::CpuKernelProfile& p = median.p;
    const infer::CpuKernelProfile& p_cpu = median.p_cpu;
    const std::vector<int64_t>& passes = median.passes;
    const std::vector<infer::cpu::PassProduct>& products = median.products;
    const MixReference& mix = median.mix;
    const PartReference& linear = mix.parts[static_cast<int>(infer::cpu::PassPart::kLinear)];
    const PartReference& att = mix.parts[static_cast<int>(infer::cpu::PassPart::kAttention)];
    const PartReference& delta = mix.parts[static_cast<int>(infer::cpu::PassPart::kDeltaRule)];
    auto rate = [](const PartReference& r) {
      return r.sgemm_s > 0 ? r.model_flops / r.sgemm_s / 1e9 : 0.0;
    };
    // The old measure: the linear layers' FLOPs over the whole pass's time, against sgemm on
    // the linear layers' shapes only (attention and the delta rule count as time, not work).
    const double sbgemm_s = TimeSbgemm(products, gemm_reps, backend->threads());
    const std::string sbgemm =
        sbgemm_s > 0 ? absl::StrFormat("%.0f%% of sbgemm (%.1f GFLOP/s)", 100 * sbgemm_s / elapsed,
                                       linear.model_flops / sbgemm_s / 1e9)
                     : std::string("no sbgemm in this OpenBLAS");
    std::cout << absl::StrFormat("prefill %d tokens (%d passes): %.1f tokens/s, %.3f s; %s%s\n", n,
                                 passes.size(), static_cast<double>(n) / elapsed, elapsed,
                                 BothShares(p, elapsed, p_cpu, elapsed_cpu), median.steal);
    std::cout << absl::StrFormat(
        "prefill %d tokens, linear layers only (the old measure): %.1f GFLOP/s = %.0f%% of sgemm "
        "on the linear layers' shapes (%.1f GFLOP/s), %s; per processor-second %.0f%% of "
        "sgemm's\n",
        n, linear.model_flops / elapsed / 1e9, 100 * linear.sgemm_s / elapsed, rate(linear), sbgemm,
        100 * linear.sgemm_cpu_s / elapsed_cpu);
    // The target's measure: every model FLOP of the pass (the linear layers, attention's causal
    // products, the delta rule's chunked products) over the pass's time, against sgemm on the
    // same FLOP-weighted mix of shapes.
    std::cout << absl::StrFormat(
        "prefill %d tokens, the target's measure (model FLOPs against sgemm on the same mix): "
        "%.1f GFLOP (linear layers %.1f, attention %.1f causal of %.1f computed in its blocks' "
        "shapes, delta rule %.1f) = %.1f GFLOP/s = %.0f%% of sgemm on the same mix "
        "(%.1f GFLOP/s; on the linear layers' shapes %.1f, attention's %.1f, the delta rule's "
        "%.1f); per processor-second %.0f%% of sgemm's%s\n",
        n, mix.model_flops() / 1e9, linear.model_flops / 1e9, att.model_flops / 1e9,
        att.shape_flops / 1e9, delta.model_flops / 1e9, mix.model_flops() / elapsed / 1e9,
        100 * mix.sgemm_s() / elapsed, mix.model_flops() / mix.sgemm_s() / 1e9, rate(linear),
        rate(att), rate(delta), 100 * mix.sgemm_cpu_s() / elapsed_cpu, spread);
  }
  if (!compare_gemm_split.empty()) {
    RETURN_IF_ERROR(CompareGemmSplit(model_dir, backend_options, compare_gemm_split, *model,
                                     prefill, max_pass, compare_rounds));
  }
  std::error_code ec;
  std::filesystem::remove_all(work_dir, ec);
  return absl::OkStatus();
}

}  // namespace
}  // namespace cairn::bench

int main(int argc, char** argv) {
  const absl::Status s = cairn::bench::Run(argc, argv);
  if (s.ok()) return 0;
  std::cerr << "cairn-cpu-bench: " << s << "\n";
  return 1;
}
