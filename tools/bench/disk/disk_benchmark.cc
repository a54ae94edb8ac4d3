// Disk-tier and arena benchmarks (issue 6): restore throughput from the arena and from disk
// (warm and cold page cache) against this machine's memcpy and sequential-read bandwidth,
// measured in the same run, and start-up time with 10,000 checkpoints in the catalog.
//
//   cairn_disk_benchmark [--benchmark_filter=...]
// Files go under $CAIRN_BENCH_DIR (default: the system temp directory); it must be a real
// disk for the disk numbers to mean anything. Cold reads drop each file from the page cache
// with posix_fadvise(DONTNEED), which works without privileges for clean pages.

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/cache/arena/arena.h"
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
  std::filesystem::path dir = root / ("cairn-disk-bench-" + std::to_string(::getpid()) + "-" +
                                      name);
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

std::vector<uint8_t> Filled(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

// The machine's memcpy bandwidth over the restore size.
void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> src = Filled(kTotalBytes, 1), dst(kTotalBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kTotalBytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * kTotalBytes);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The machine's sequential read bandwidth (1 MiB preads) over one file of the restore size;
// range(0) = 1 for a cold page cache.
void BM_SequentialRead(benchmark::State& state) {
  const bool cold = state.range(0) == 1;
  const std::string dir = BenchDir("seq");
  const std::string path = dir + "/file";
  {
    std::vector<uint8_t> data = Filled(kTotalBytes, 2);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size()) ||
        ::fsync(fd) != 0) {
      state.SkipWithError("cannot write the sequential-read file");
      return;
    }
    ::close(fd);
  }
  std::vector<uint8_t> buffer(1 << 20);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      DropFromPageCache(dir);
      state.ResumeTiming();
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    uint64_t done = 0;
    while (done < kTotalBytes) {
      ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<uint64_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(state.iterations() * kTotalBytes);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SequentialRead)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Restore from the arena: every region resolved (validated) and copied out, as the inference
// daemon copies a RAM checkpoint into a slot.
void BM_RestoreFromArena(benchmark::State& state) {
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
  regions.push_back(
      (*arena)->allocator().Allocate(kStateBytes, RegionKind::kPrivateState)->handle);
  for (const ArenaHandle& h : regions) {
    auto bytes = (*arena)->Resolve(h);
    std::memset(bytes->data(), 7, bytes->size());
  }
  std::vector<uint8_t> slot(kTotalBytes);
  for (auto _ : state) {
    uint64_t at = 0;
    for (const ArenaHandle& h : regions) {
      auto bytes = (*arena)->Resolve(h);
      if (!bytes.ok()) {
        state.SkipWithError("resolve failed");
        return;
      }
      std::memcpy(slot.data() + at, bytes->data(), bytes->size());
      at += bytes->size();
    }
    benchmark::DoNotOptimize(slot.data());
  }
  state.SetBytesProcessed(state.iterations() * kTotalBytes);
}
BENCHMARK(BM_RestoreFromArena)->Unit(benchmark::kMillisecond)->UseRealTime();

// Restore from disk through 1 MiB staging buffers with checksum verification, into a
// destination (the arena region the inference daemon then copies from); range(0) = 1 for a
// cold page cache.
void BM_RestoreFromDisk(benchmark::State& state) {
  const bool cold = state.range(0) == 1;
  const std::string dir = BenchDir("restore");
  DiskStoreOptions options;
  options.root = dir;
  options.free_space_reserve_bytes = 0;
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
    r.new_chunks.push_back(ChunkWrite{
        ChunkIdentity{static_cast<uint64_t>(i + 1), 0, i * uint64_t{kChunkRows}, kChunkRows,
                      kRowBytes},
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
  std::vector<uint8_t> destination(kTotalBytes);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      DropFromPageCache(dir);
      state.ResumeTiming();
    }
    uint64_t at = 0;
    absl::Status s = (*store)->Restore(1, [&](const RestorePiece& piece) {
      absl::Span<uint8_t> out(destination.data() + at, piece.bytes);
      at += piece.bytes;
      return out;
    });
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * kTotalBytes);
  store->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RestoreFromDisk)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Start-up (R1): open the catalog, reconcile 10,000 checkpoints by catalog and file sizes.
// The tier is populated once through FaultFS with simulated fsyncs (population speed is not
// what is measured), then opened for real each iteration.
void BM_StartupWith10kCheckpoints(benchmark::State& state) {
  const std::string dir = BenchDir("startup");
  {
    FaultFileSystem fast(PosixFileSystem());
    DiskStoreOptions options;
    options.root = dir;
    options.free_space_reserve_bytes = 0;
    options.catalog_fs = NewRocksDbFaultFs(&fast);
    auto store = DiskStore::Create(options, &fast);
    if (!store.ok()) {
      state.SkipWithError(std::string(store.status().message()).c_str());
      return;
    }
    std::vector<uint8_t> chunk = Filled(16 * 1024, 3), tail = Filled(4096, 4);
    PublishRequest base;
    base.compat_digest = "bench";
    base.checkpoint_id = 1;
    for (int i = 0; i < kStartupSharedChunks; ++i) {
      base.new_chunks.push_back(ChunkWrite{
          ChunkIdentity{static_cast<uint64_t>(i + 1), 0, i * 16ull, 16, 1024}, chunk});
    }
    base.sections = {StateSection{1, SectionKind::kPrivate, 0, 0, tail.size()}};
    base.state = tail;
    base.tokens.assign(kStartupSharedChunks * 16 + 1, 5);
    if (absl::Status s = (*store)->Publish(base); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    PublishRequest next = base;
    next.new_chunks.clear();
    for (int i = 0; i < kStartupSharedChunks; ++i) next.shared_chunk_ids.push_back(i + 1);
    for (int id = 2; id <= kStartupCheckpoints; ++id) {
      next.checkpoint_id = id;
      next.tokens.back() = id;
      if (absl::Status s = (*store)->Publish(next); !s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
    }
  }
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
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StartupWith10kCheckpoints)->Unit(benchmark::kMillisecond)->UseRealTime()
    ->Iterations(3);

}  // namespace
}  // namespace cairn::cache
