#ifndef CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_TEST_UTIL_H_

// Helpers for disk-tier tests: a temporary directory, deterministic payloads, and a builder
// for checkpoints with new and shared chunks whose expected bytes are remembered.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/disk/background_writer.h"
#include "services/cache/disk/disk_store.h"

namespace cairn::cache::testing {

// A fresh directory under the system temp dir, removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Returns `n` deterministic pseudo-random bytes for `seed`.
std::vector<uint8_t> Pattern(uint64_t seed, size_t n);

// Remembers the bytes of every chunk and checkpoint it builds, so a restore can be compared
// byte for byte. Thread-compatible.
class CheckpointFactory {
 public:
  CheckpointFactory(uint32_t chunk_rows, uint64_t row_bytes) : rows_(chunk_rows),
                                                               row_bytes_(row_bytes) {}

  // Builds checkpoint `id` covering `n_new + shared.size()` chunks of component 0: the shared
  // ones first (which must have been built before), then `n_new` new ones, plus a private
  // state of `state_bytes` and a tail of `tail_rows` rows.
  PublishRequest Build(uint64_t id, const std::vector<uint64_t>& shared, int n_new,
                       uint64_t state_bytes = 4096, uint32_t tail_rows = 3);

  // The bytes a full restore of `id` must deliver: state payload, then chunks in manifest
  // order, concatenated.
  std::vector<uint8_t> Expected(uint64_t id) const;
  // Chunk ids of checkpoint `id`, in order.
  const std::vector<uint64_t>& ChunksOf(uint64_t id) const { return chunks_of_.at(id); }

 private:
  uint32_t rows_;
  uint64_t row_bytes_;
  uint64_t next_chunk_ = 1;
  std::map<uint64_t, std::vector<uint8_t>> chunk_bytes_;
  std::map<uint64_t, std::vector<uint8_t>> state_bytes_;
  std::map<uint64_t, std::vector<uint64_t>> chunks_of_;
};

// Restores `id` into heap buffers and returns the concatenation (state, then chunks).
absl::StatusOr<std::vector<uint8_t>> RestoreAll(DiskStore* store, uint64_t id);

// Opens a store at `root` on the POSIX file system with no free-space reserve.
absl::StatusOr<std::unique_ptr<DiskStore>> OpenTestStore(const std::string& root);

// Returns every file name under `root`'s chunks/, states/ and manifests/ directories.
std::vector<std::string> DataFiles(const std::string& root);

// The POSIX file system with hooks, for tests that need something to happen at a precise file
// operation: after each successful rename (given its destination) or deletion (given the path),
// and before each file is created or its size asked for (given the path). Set the hooks before
// the store runs; they run on the caller's thread.
class HookFileSystem final : public FileSystem {
 public:
  void SetBeforeCreate(std::function<void(const std::string& path)> hook) {
    before_create_ = std::move(hook);
  }
  void SetAfterRename(std::function<void(const std::string& to)> hook) {
    after_rename_ = std::move(hook);
  }
  void SetAfterDelete(std::function<void(const std::string& path)> hook) {
    after_delete_ = std::move(hook);
  }
  void SetBeforeFileSize(std::function<void(const std::string& path)> hook) {
    before_file_size_ = std::move(hook);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    return base_->NewReadableFile(p);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Delete(const std::string& p) override;
  absl::Status CreateDir(const std::string& p) override { return base_->CreateDir(p); }
  absl::Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return base_->ListDir(p);
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& p) override;
  std::vector<absl::StatusOr<uint64_t>> FileSizesIn(
      const std::string& dir, absl::Span<const absl::string_view> names) override {
    return base_->FileSizesIn(dir, names);
  }
  absl::StatusOr<uint64_t> FreeBytes(const std::string& p) override { return base_->FreeBytes(p); }

 private:
  FileSystem* const base_ = PosixFileSystem();
  std::function<void(const std::string&)> before_create_;
  std::function<void(const std::string&)> after_rename_;
  std::function<void(const std::string&)> after_delete_;
  std::function<void(const std::string&)> before_file_size_;
};

// A model that is busy until told otherwise, so a test can hold the background writer between
// staging pieces. Thread-safe.
class FakeModelActivity final : public ModelActivity {
 public:
  bool WaitUntilIdle(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetBusy(bool busy) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the writer has asked at least `n` times; false after `deadline`.
  bool WaitForWaits(int n, absl::Duration deadline = absl::Seconds(30)) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Mutex mu_;
  CondVar cv_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  int waits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cairn::cache::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_TEST_UTIL_H_
