#ifndef CAIRN_SERVICES_CACHE_DISK_TESTING_FAULT_FILE_SYSTEM_H_
#define CAIRN_SERVICES_CACHE_DISK_TESTING_FAULT_FILE_SYSTEM_H_

// FaultFileSystem ("FaultFS"): an in-process fault-injection layer over the POSIX file system
// for crash-consistency and I/O-error tests (docs/reliability.md §5.1, tests A1, A7).
//
// It passes every operation to the real file system below a test directory and remembers what
// is not yet durable: file data written since the file's last Sync, and directory entries
// created, renamed or removed since their directory's last SyncDir. SimulateCrash then rewrites
// the real directory into a state a power loss could have left, under one of four models.
// RocksDB reaches the same tracker through RocksDbFaultFs (rocksdb_fault_fs.h), so one
// operation counter covers the catalog too.
//
// Assumes files are written front to back (true of the disk tier and of RocksDB's files).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/concurrency/mutex.h"
#include "services/cache/disk/file_system.h"

namespace cairn::cache {

enum class CrashModel {
  kDropUnsyncedData,  // Every file loses all data written since its last Sync.
  kDropRandomTail,    // Every file keeps a random prefix of its unsynced data.
  kLoseDirEntries,    // Unsynced creates, renames and unlinks are undone; unsynced data
                      // is dropped as in kDropUnsyncedData.
  kWriteList,         // SQLite's crash write-list: each unsynced write is kept, dropped
                      // (zeros) or, one time in four, its sectors trashed with garbage.
};
inline constexpr CrashModel kAllCrashModels[] = {
    CrashModel::kDropUnsyncedData, CrashModel::kDropRandomTail, CrashModel::kLoseDirEntries,
    CrashModel::kWriteList};
const char* CrashModelName(CrashModel model);

struct FaultFileSystemOptions {
  uint64_t sector_bytes = 512;  // Granularity of write-list garbage.
  // Whether Sync and SyncDir reach the real file system. Durability is simulated by the
  // tracker either way; skipping the real fsyncs keeps crash tests fast on busy disks.
  bool pass_syncs = false;
};

// Thread-safe. Operations run one at a time under one lock, so the operation order is total.
// Counted operations: create, append, sync, rename, delete, directory sync. Reads, listings
// and stats are not counted but fail once the file system has crashed.
class FaultFileSystem final : public FileSystem {
 public:
  // `base` must outlive this object and must be the POSIX file system (SimulateCrash edits the
  // real files).
  explicit FaultFileSystem(FileSystem* base, FaultFileSystemOptions options = {});
  ~FaultFileSystem() override;

  // FileSystem.
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Delete(const std::string& path) override;
  absl::Status CreateDir(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override;
  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override;

  // Operations 1..k succeed; operation k + 1 and everything after fail with Unavailable, as if
  // the process had died there. k < 0 disables the crash.
  void SetCrashAfter(int64_t k) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails counted operation number `op` (1-based) with `error`; when `persistent`, every later
  // operation fails with it too.
  void InjectError(int64_t op, absl::Status error, bool persistent) ABSL_LOCKS_EXCLUDED(mu_);
  // Overrides FreeBytes (to test ENOSPC handling); nullopt = the real value.
  void SetFreeBytes(std::optional<uint64_t> bytes) ABSL_LOCKS_EXCLUDED(mu_);
  bool crashed() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t op_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // The counted operations since construction or the last ClearOpLog ("sync chunks/c-1...").
  std::vector<std::string> op_log() const ABSL_LOCKS_EXCLUDED(mu_);
  void ClearOpLog() ABSL_LOCKS_EXCLUDED(mu_);

  // Rewrites the real files into a state a power loss at this moment could leave under
  // `model` (random choices from `seed`), then treats everything as durable and clears the
  // crash and any injected errors. Call only when no file of this object is open for writing.
  absl::Status SimulateCrash(CrashModel model, uint64_t seed) ABSL_LOCKS_EXCLUDED(mu_);

  // Hooks for wrappers of other file-system APIs (RocksDbFaultFs). Each counts one operation,
  // fails it if it is a crash or injection point, otherwise runs `op` and records its effect
  // on durability when `op` succeeds.
  absl::Status TrackedCreate(const std::string& path, const std::function<absl::Status()>& op);
  absl::Status TrackedAppend(const std::string& path, uint64_t bytes,
                             const std::function<absl::Status()>& op);
  absl::Status TrackedSync(const std::string& path, const std::function<absl::Status()>& op);
  absl::Status TrackedRename(const std::string& from, const std::string& to,
                             const std::function<absl::Status()>& op);
  absl::Status TrackedDelete(const std::string& path, const std::function<absl::Status()>& op);
  absl::Status TrackedSyncDir(const std::string& dir, const std::function<absl::Status()>& op);
  // Unavailable once crashed (for uncounted operations).
  absl::Status CheckAlive() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
    std::vector<std::pair<uint64_t, uint64_t>> unsynced_writes;  // (offset, length).
  };
  struct DirOp {
    enum Kind { kCreate, kRename, kDelete } kind;
    std::string path;                     // Created, renamed-to or deleted path.
    std::string from;                     // kRename: the old name.
    std::optional<std::string> saved;     // Durable bytes to put back at `path` on undo.
    std::optional<FileState> from_state;  // kRename: tracking state of the moved file.
  };

  absl::Status BeginOpLocked(std::string description) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<std::string> DurableContentLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UndoDirOpsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ResetDataLocked(CrashModel model, uint64_t seed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FileSystem* const base_;
  const FaultFileSystemOptions options_;
  mutable Mutex mu_;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  std::vector<DirOp> pending_ ABSL_GUARDED_BY(mu_);  // Unsynced directory operations, in order.
  std::vector<std::string> op_log_ ABSL_GUARDED_BY(mu_);
  int64_t ops_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t crash_after_ ABSL_GUARDED_BY(mu_) = -1;
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t inject_at_ ABSL_GUARDED_BY(mu_) = -1;
  bool inject_persistent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status injected_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> free_bytes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_TESTING_FAULT_FILE_SYSTEM_H_
