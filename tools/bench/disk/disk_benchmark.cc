// Disk-tier and arena benchmarks: restore throughput from the arena and from disk (warm and
// cold page cache) against this machine's memcpy and sequential-read bandwidth, each paired
// with its reference in every iteration, and start-up time with 10,000 checkpoints in the
// catalog, of the disk tier alone and of the whole daemon (docs/benchmarks.md, "Disk tier").
//
//   cairn_disk_benchmark [--benchmark_filter=...]
// Files go under $CAIRN_BENCH_DIR (default: the system temp directory); it must be a real
// disk for the disk numbers to mean anything. Cold reads drop each file from the page cache
// with posix_fadvise(DONTNEED), which works without privileges for clean pages.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/shm/bulk_copy.h"
#include "common/status/status_macros.h"
#include "services/cache/arena/arena.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"

namespace cairn::cache {
namespace {

// Sizes of the restore benchmarks: a checkpoint of kChunks chunks of kChunkBytes (256 rows
// of 16 KiB: one attention component's chunk of a mid-size model) plus kStateBytes.
constexpr uint32_t kChunkRows = 256;
constexpr uint64_t kRowBytes = 16 << 10;
constexpr uint64_t kChunkBytes = kChunkRows * kRowBytes;  // 4 MiB.
constexpr int kChunks = 64;                               // 256 MiB of rows.
constexpr uint64_t kStateBytes = 32 << 20;                // 32 MiB of private state.
constexpr uint64_t kTotalBytes = kChunks * kChunkBytes + kStateBytes;
constexpr int kStartupCheckpoints = 10000;
constexpr int kStartupSharedChunks = 64;

std::string BenchDir(const std::string& name) {
  const char* base = std::getenv("CAIRN_BENCH_DIR");
  std::filesystem::path root = base != nullptr ? base : std::filesystem::temp_directory_path();
  std::filesystem::path dir =
      root / ("cairn-disk-bench-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void DropFromPageCache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Reads `path` front to back in preads of `buffer`'s size; returns the bytes read.
uint64_t ReadWhole(const std::string& path, std::vector<uint8_t>* buffer) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  uint64_t done = 0;
  while (fd >= 0) {
    ssize_t n = ::pread(fd, buffer->data(), buffer->size(), static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<uint64_t>(n);
  }
  if (fd >= 0) ::close(fd);
  benchmark::DoNotOptimize(buffer->data());
  return done;
}

std::vector<uint8_t> Filled(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

// Each restore benchmark measures its reference (the machine's limit) and the restore in the
// same iteration, one right after the other, alternating which goes first, over the same bytes
// into the same destination, so that load on a shared machine hits both alike. The reported
// time is the restore's; the counters are medians over the iterations: ref_GBps, restore_GBps
// and ratio (restore / reference, per iteration), with ratio_min and ratio_max as the spread.
class Paired {
 public:
  // Times `reference` and `restore` once each, in an order that alternates per call.
  template <typename R, typename M>
  void Run(benchmark::State& state, R&& reference, M&& restore) {
    double ref_s = 0, restore_s = 0;
    if (runs_ % 2 == 0) {
      ref_s = Seconds(reference);
      restore_s = Seconds(restore);
    } else {
      restore_s = Seconds(restore);
      ref_s = Seconds(reference);
    }
    ++runs_;
    ref_.push_back(ref_s);
    restore_.push_back(restore_s);
    state.SetIterationTime(restore_s);
  }

  // Times `read_files` (a plain read of the restore's own files) for the same iteration: not
  // a reference, a diagnosis of what the file layout itself costs on this storage.
  template <typename F>
  void RunFiles(F&& read_files) {
    files_.push_back(Seconds(read_files));
  }

  void Report(benchmark::State& state, uint64_t bytes) const {
    std::vector<double> ratios;
    for (size_t i = 0; i < ref_.size(); ++i) ratios.push_back(ref_[i] / restore_[i]);
    state.counters["ref_GBps"] = bytes / Median(ref_) / 1e9;
    state.counters["restore_GBps"] = bytes / Median(restore_) / 1e9;
    state.counters["ratio"] = Median(ratios);
    state.counters["ratio_min"] = *std::min_element(ratios.begin(), ratios.end());
    state.counters["ratio_max"] = *std::max_element(ratios.begin(), ratios.end());
    if (!files_.empty()) {
      std::vector<double> vs_files;
      for (size_t i = 0; i < files_.size(); ++i) vs_files.push_back(files_[i] / restore_[i]);
      state.counters["files_GBps"] = bytes / Median(files_) / 1e9;
      state.counters["restore_vs_files"] = Median(vs_files);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  }

 private:
  template <typename F>
  static double Seconds(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  static double Median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

  int runs_ = 0;
  std::vector<double> ref_, restore_, files_;
};

constexpr int kPairedIterations = 9;

// Restore from the arena against memcpy: every region resolved (validated) and copied out, as
// the inference daemon copies a RAM checkpoint into a slot. The reference is one memcpy of the
// same size from ordinary memory into the same (pre-faulted) slot. range(0) = 1 copies each
// region with BulkCopy, 0 with memcpy (what the CPU backend's Upload does today).
void BM_RestoreFromArenaVsMemcpy(benchmark::State& state) {
  const bool bulk = state.range(0) == 1;
  ArenaOptions options;
  options.size_bytes = kTotalBytes + (64 << 20);
  auto arena = Arena::Create(options);
  if (!arena.ok()) {
    state.SkipWithError(std::string(arena.status().message()).c_str());
    return;
  }
  std::vector<ArenaHandle> regions;
  for (int i = 0; i < kChunks; ++i) {
    regions.push_back((*arena)->allocator().Allocate(kChunkBytes, RegionKind::kChunk)->handle);
  }
  regions.push_back((*arena)->allocator().Allocate(kStateBytes, RegionKind::kPrivateState)->handle);
  for (const ArenaHandle& h : regions) {
    auto bytes = (*arena)->Resolve(h);
    std::memset(bytes->data(), 7, bytes->size());
  }
  const std::vector<uint8_t> src = Filled(kTotalBytes, 1);
  std::vector<uint8_t> slot(kTotalBytes);
  Paired paired;
  bool resolved = true;
  for (auto _ : state) {
    paired.Run(
        state,
        [&] {
          std::memcpy(slot.data(), src.data(), kTotalBytes);
          benchmark::DoNotOptimize(slot.data());
        },
        [&] {
          uint64_t at = 0;
          for (const ArenaHandle& h : regions) {
            auto bytes = (*arena)->Resolve(h);
            if (!bytes.ok()) {
              resolved = false;
              return;
            }
            if (bulk) {
              BulkCopy(slot.data() + at, bytes->data(), bytes->size());
            } else {
              std::memcpy(slot.data() + at, bytes->data(), bytes->size());
            }
            at += bytes->size();
          }
          benchmark::DoNotOptimize(slot.data());
        });
    if (!resolved) {
      state.SkipWithError("resolve failed");
      return;
    }
  }
  paired.Report(state, kTotalBytes);
}
BENCHMARK(BM_RestoreFromArenaVsMemcpy)
    ->ArgName("bulk_copy")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(kPairedIterations);

// Restore from disk (through DiskStore::Restore: every file's header, size and checksum
// verified) into a pre-faulted destination, against the machine's sequential read bandwidth:
// 1 MiB preads of one file of the same size into a buffer. range(0) = 1 drops both from the
// page cache before each read (cold), 0 reads them from it (warm). files_GBps reads the
// checkpoint's 65 files the same way the reference reads its one file, without checking or
// keeping anything (dropped from the page cache again first when cold): restore_vs_files is
// what the restore itself costs over what its files cost to read.
void BM_RestoreFromDiskVsSequentialRead(benchmark::State& state) {
  const bool cold = state.range(0) == 1;
  const std::string dir = BenchDir(cold ? "restore-cold" : "restore-warm");
  const std::string seq_dir = dir + "/seq";
  const std::string seq_path = seq_dir + "/file";
  {
    std::filesystem::create_directories(seq_dir);
    std::vector<uint8_t> data = Filled(kTotalBytes, 2);
    int fd = ::open(seq_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    const bool ok = fd >= 0 &&
                    ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
                    ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok) {
      state.SkipWithError("cannot write the sequential-read file");
      return;
    }
  }
  DiskStoreOptions options;
  options.root = dir + "/tier";
  options.free_space_reserve_bytes = 0;
  // $CAIRN_BENCH_RESTORE_THREADS overrides DiskStoreOptions::restore_threads, to compare
  // settings in one binary.
  if (const char* threads = std::getenv("CAIRN_BENCH_RESTORE_THREADS")) {
    options.restore_threads = std::atoi(threads);
  }
  auto store = DiskStore::Create(options, PosixFileSystem());
  if (!store.ok()) {
    state.SkipWithError(std::string(store.status().message()).c_str());
    return;
  }
  std::vector<std::vector<uint8_t>> chunks;
  PublishRequest r;
  r.checkpoint_id = 1;
  r.compat_digest = "bench";
  for (int i = 0; i < kChunks; ++i) {
    chunks.push_back(Filled(kChunkBytes, static_cast<uint8_t>(i)));
    r.new_chunks.push_back(
        ChunkWrite{ChunkIdentity{static_cast<uint64_t>(i + 1), 0, i * uint64_t{kChunkRows},
                                 kChunkRows, kRowBytes},
                   chunks.back()});
  }
  std::vector<uint8_t> private_state = Filled(kStateBytes, 9);
  r.sections = {StateSection{1, SectionKind::kPrivate, 0, 0, kStateBytes}};
  r.state = private_state;
  r.tokens.assign(kChunks * kChunkRows, 1);
  if (absl::Status s = (*store)->Publish(r); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  chunks.clear();
  std::vector<uint8_t> buffer(1 << 20);
  std::vector<uint8_t> destination(kTotalBytes);
  Paired paired;
  absl::Status status;
  for (auto _ : state) {
    if (cold) DropFromPageCache(dir);
    paired.Run(
        state,
        [&] {
          if (ReadWhole(seq_path, &buffer) != kTotalBytes) {
            status = absl::DataLossError("short sequential read");
          }
        },
        [&] {
          uint64_t at = 0;
          absl::Status s = (*store)->Restore(1, [&](const RestorePiece& piece) {
            absl::Span<uint8_t> out(destination.data() + at, piece.bytes);
            at += piece.bytes;
            return out;
          });
          if (!s.ok()) status = s;
        });
    if (cold) DropFromPageCache(dir);
    paired.RunFiles([&] {
      for (const char* sub : {"/tier/states", "/tier/chunks"}) {
        std::vector<std::string> paths;
        for (const auto& e : std::filesystem::directory_iterator(dir + sub)) {
          paths.push_back(e.path().string());
        }
        std::sort(paths.begin(), paths.end());
        for (const std::string& path : paths) ReadWhole(path, &buffer);
      }
    });
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  paired.Report(state, kTotalBytes);
  store->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RestoreFromDiskVsSequentialRead)
    ->ArgName("cold")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(kPairedIterations);

// Start-up (R1) with 10,000 checkpoints sharing 64 chunks: each has 1,025 tokens (1,024 shared
// and its id), 16-row chunks of 1 KiB rows and a 4 KiB state file. The tier is populated once
// through FaultFS with simulated fsyncs (population speed is not what is measured), then
// opened for real each iteration. $CAIRN_BENCH_STARTUP_DIR names a directory to keep the
// tier in: populated on the first run (when it holds no catalog yet), reused and kept by
// later ones, so that binaries can be compared on the same files and many iterations cost no
// population.
constexpr uint32_t kStartupChunkRows = 16;
constexpr uint64_t kStartupRowBytes = 1024;
constexpr uint64_t kStartupStateBytes = 4096;
constexpr char kStartupDigest[] = "bench";

// A session that ignores what the daemon sends it.
class NullSink final : public SessionSink {
 public:
  void Send(v1::SessionServerMessage) override {}
};

absl::Status PopulateStartupTier(const std::string& dir) {
  FaultFileSystem fast(PosixFileSystem());
  DiskStoreOptions options;
  options.root = dir;
  options.free_space_reserve_bytes = 0;
  options.catalog_fs = NewRocksDbFaultFs(&fast);
  ASSIGN_OR_RETURN(std::unique_ptr<DiskStore> store, DiskStore::Create(options, &fast));
  std::vector<uint8_t> chunk = Filled(kStartupChunkRows * kStartupRowBytes, 3);
  std::vector<uint8_t> state = Filled(kStartupStateBytes, 4);
  PublishRequest base;
  base.compat_digest = kStartupDigest;
  base.checkpoint_id = 1;
  for (int i = 0; i < kStartupSharedChunks; ++i) {
    base.new_chunks.push_back(
        ChunkWrite{ChunkIdentity{static_cast<uint64_t>(i + 1), 0, i * uint64_t{kStartupChunkRows},
                                 kStartupChunkRows, kStartupRowBytes},
                   chunk});
  }
  base.sections = {StateSection{1, SectionKind::kPrivate, 0, 0, state.size()}};
  base.state = state;
  base.tokens.assign(kStartupSharedChunks * kStartupChunkRows + 1, 5);
  RETURN_IF_ERROR(store->Publish(base));
  PublishRequest next = base;
  next.new_chunks.clear();
  for (int i = 0; i < kStartupSharedChunks; ++i) next.shared_chunk_ids.push_back(i + 1);
  for (int id = 2; id <= kStartupCheckpoints; ++id) {
    next.checkpoint_id = id;
    next.tokens.back() = id;
    RETURN_IF_ERROR(store->Publish(next));
  }
  return absl::OkStatus();
}

// The start-up tier's directory, populated if it needs to be; empty after SkipWithError.
std::string StartupTier(benchmark::State& state, bool* kept) {
  const char* env = std::getenv("CAIRN_BENCH_STARTUP_DIR");
  *kept = env != nullptr;
  const std::string dir = *kept ? env : BenchDir("startup");
  if (!*kept || !std::filesystem::exists(dir + "/catalog")) {
    if (absl::Status s = PopulateStartupTier(dir); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return "";
    }
  }
  return dir;
}

// The disk tier alone: open the catalog, reconcile it with the files.
void BM_StartupWith10kCheckpoints(benchmark::State& state) {
  bool kept = false;
  const std::string dir = StartupTier(state, &kept);
  if (dir.empty()) return;
  uint64_t recovered = 0;
  for (auto _ : state) {
    DiskStoreOptions options;
    options.root = dir;
    options.free_space_reserve_bytes = 0;
    auto store = DiskStore::Create(options, PosixFileSystem());
    if (!store.ok()) {
      state.SkipWithError(std::string(store.status().message()).c_str());
      return;
    }
    recovered = (*store)->stats().checkpoints;
    state.PauseTiming();
    store->reset();
    state.ResumeTiming();
  }
  state.counters["checkpoints"] = static_cast<double>(recovered);
  if (!kept) std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StartupWith10kCheckpoints)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

// CPU time of the calling thread.
double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The daemon's start-up on the same tier: CacheDaemon::Create (arena, disk tier with every
// manifest handed to the daemon, core) until it could answer; then `admit_ms`, the first
// registration of the model, which files the 10,000 checkpoints into its prefix index
// (`admit_cpu_ms`: the CPU time that takes).
void BM_DaemonStartupWith10kCheckpoints(benchmark::State& state) {
  bool kept = false;
  const std::string dir = StartupTier(state, &kept);
  if (dir.empty()) return;
  ModelRegistration reg;
  reg.compatibility = kStartupDigest;
  reg.layout.chunk_rows = kStartupChunkRows;
  reg.layout.components = {
      StateComponent{"rows", ComponentKind::kRows, static_cast<int64_t>(kStartupRowBytes), 0},
      StateComponent{"private", ComponentKind::kPrivate, 0,
                     static_cast<int64_t>(kStartupStateBytes - kStartupRowBytes)}};
  double admit_seconds = 0, admit_cpu_seconds = 0;
  uint64_t admitted = 0;
  for (auto _ : state) {
    CacheDaemonOptions options;
    options.cache.ram_bytes = 64 << 20;
    options.disk_root = dir;
    options.disk.free_space_reserve_bytes = 0;
    absl::StatusOr<std::unique_ptr<CacheDaemon>> daemon =
        CacheDaemon::Create(options, RealClock::Get());
    if (!daemon.ok()) {
      state.SkipWithError(std::string(daemon.status().message()).c_str());
      return;
    }
    state.PauseTiming();
    NullSink sink;
    absl::StatusOr<SessionWelcome> welcome =
        (*daemon)->OpenSession(SessionHello{"bench", 1, 1}, &sink);
    reg.session_id = welcome.ok() ? welcome->session_id : 0;
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ThreadCpuSeconds();
    absl::StatusOr<RegisteredModel> registered = (*daemon)->RegisterModel(reg);
    admit_cpu_seconds += ThreadCpuSeconds() - cpu_start;
    admit_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!registered.ok()) {
      state.SkipWithError(std::string(registered.status().message()).c_str());
      return;
    }
    admitted = registered->disk_checkpoints;
    daemon->reset();
    state.ResumeTiming();
  }
  state.counters["checkpoints"] = static_cast<double>(admitted);
  state.counters["admit_ms"] = 1e3 * admit_seconds / static_cast<double>(state.iterations());
  state.counters["admit_cpu_ms"] =
      1e3 * admit_cpu_seconds / static_cast<double>(state.iterations());
  if (!kept) std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DaemonStartupWith10kCheckpoints)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace
}  // namespace cairn::cache
