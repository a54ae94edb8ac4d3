#include "services/cache/disk/testing/fault_file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shm/unique_fd.h"
#include "common/status/status_macros.h"

namespace cairn::cache {
namespace {

absl::Status PosixError(absl::string_view op, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(errno),
                      absl::StrCat("fault fs ", op, " ", path, ": ", std::strerror(errno)));
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

absl::Status WriteWholeFile(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd.valid()) return PosixError("restore", path);
  if (!bytes.empty() && ::pwrite(fd.get(), bytes.data(), bytes.size(), 0) !=
                            static_cast<ssize_t>(bytes.size())) {
    return PosixError("restore write", path);
  }
  return absl::OkStatus();
}

// Writes `length` bytes at `offset` of `path`: zeros, or random garbage from `rng`.
absl::Status Overwrite(const std::string& path, uint64_t offset, uint64_t length,
                       std::mt19937_64* rng) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return PosixError("open", path);
  std::string bytes(length, '\0');
  if (rng != nullptr) {
    for (char& c : bytes) c = static_cast<char>((*rng)() & 0xff);
  }
  if (::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
      static_cast<ssize_t>(bytes.size())) {
    return PosixError("overwrite", path);
  }
  return absl::OkStatus();
}

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultFileSystem* fs, std::string path, std::unique_ptr<WritableFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    return fs_->TrackedAppend(path_, data.size(), [&] { return base_->Append(data); });
  }
  absl::Status Sync() override {
    return fs_->TrackedSync(path_, [&] { return base_->Sync(); });
  }
  absl::Status Close() override { return base_->Close(); }
  uint64_t size() const override { return base_->size(); }

 private:
  FaultFileSystem* const fs_;
  const std::string path_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

const char* CrashModelName(CrashModel model) {
  switch (model) {
    case CrashModel::kDropUnsyncedData:
      return "drop-unsynced";
    case CrashModel::kDropRandomTail:
      return "drop-random-tail";
    case CrashModel::kLoseDirEntries:
      return "lose-dir-entries";
    case CrashModel::kWriteList:
      return "write-list";
  }
  return "unknown";
}

FaultFileSystem::FaultFileSystem(FileSystem* base, FaultFileSystemOptions options)
    : base_(base), options_(options) {}

FaultFileSystem::~FaultFileSystem() = default;

absl::Status FaultFileSystem::BeginOpLocked(std::string description) {
  if (crashed_) return absl::UnavailableError("fault fs: simulated crash");
  ++ops_;
  op_log_.push_back(std::move(description));
  if (inject_at_ >= 0 && (ops_ == inject_at_ || (inject_persistent_ && ops_ > inject_at_))) {
    return injected_;
  }
  if (crash_after_ >= 0 && ops_ > crash_after_) {
    crashed_ = true;
    return absl::UnavailableError("fault fs: simulated crash");
  }
  return absl::OkStatus();
}

absl::Status FaultFileSystem::CheckAlive() const {
  MutexLock lock(&mu_);
  if (crashed_) return absl::UnavailableError("fault fs: simulated crash");
  return absl::OkStatus();
}

std::optional<std::string> FaultFileSystem::DurableContentLocked(const std::string& path) {
  if (!Exists(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string content = bytes.str();
  auto it = files_.find(path);
  if (it != files_.end()) content.resize(std::min<uint64_t>(content.size(), it->second.synced));
  return content;
}

absl::Status FaultFileSystem::TrackedCreate(const std::string& path,
                                            const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("create ", path)));
  RETURN_IF_ERROR(op());
  files_[path] = FileState{};
  pending_.push_back(DirOp{DirOp::kCreate, path, "", std::nullopt, std::nullopt});
  return absl::OkStatus();
}

absl::Status FaultFileSystem::TrackedAppend(const std::string& path, uint64_t bytes,
                                            const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("append ", path)));
  FileState& st = files_[path];
  const uint64_t offset = st.size;
  absl::Status s = op();
  // A failed write may still have written a prefix; count the whole range as unsynced.
  st.size = offset + bytes;
  st.unsynced_writes.emplace_back(offset, bytes);
  return s;
}

absl::Status FaultFileSystem::TrackedSync(const std::string& path,
                                          const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("sync ", path)));
  if (options_.pass_syncs) RETURN_IF_ERROR(op());
  FileState& st = files_[path];
  st.synced = st.size;
  st.unsynced_writes.clear();
  return absl::OkStatus();
}

absl::Status FaultFileSystem::TrackedRename(const std::string& from, const std::string& to,
                                            const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("rename ", from, " ", to)));
  std::optional<std::string> saved = DurableContentLocked(to);
  RETURN_IF_ERROR(op());
  std::optional<FileState> state;
  if (auto it = files_.find(from); it != files_.end()) {
    state = it->second;
    files_.erase(it);
  }
  files_.erase(to);
  if (state.has_value()) files_[to] = *state;
  pending_.push_back(DirOp{DirOp::kRename, to, from, std::move(saved), state});
  return absl::OkStatus();
}

absl::Status FaultFileSystem::TrackedDelete(const std::string& path,
                                            const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("delete ", path)));
  std::optional<std::string> saved = DurableContentLocked(path);
  RETURN_IF_ERROR(op());
  files_.erase(path);
  pending_.push_back(DirOp{DirOp::kDelete, path, "", std::move(saved), std::nullopt});
  return absl::OkStatus();
}

absl::Status FaultFileSystem::TrackedSyncDir(const std::string& dir,
                                             const std::function<absl::Status()>& op) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(BeginOpLocked(absl::StrCat("syncdir ", dir)));
  if (options_.pass_syncs) RETURN_IF_ERROR(op());
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const DirOp& d) { return DirName(d.path) == dir; }),
                 pending_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultFileSystem::NewWritableFile(
    const std::string& path) {
  std::unique_ptr<WritableFile> file;
  RETURN_IF_ERROR(TrackedCreate(path, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(file, base_->NewWritableFile(path));
    return absl::OkStatus();
  }));
  return std::make_unique<FaultWritableFile>(this, path, std::move(file));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> FaultFileSystem::NewReadableFile(
    const std::string& path) {
  RETURN_IF_ERROR(CheckAlive());
  return base_->NewReadableFile(path);
}

absl::Status FaultFileSystem::Rename(const std::string& from, const std::string& to) {
  return TrackedRename(from, to, [&] { return base_->Rename(from, to); });
}

absl::Status FaultFileSystem::Delete(const std::string& path) {
  return TrackedDelete(path, [&] { return base_->Delete(path); });
}

absl::Status FaultFileSystem::CreateDir(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive());
  // Directories are created once, at set-up, and treated as durable.
  return base_->CreateDir(path);
}

absl::Status FaultFileSystem::SyncDir(const std::string& path) {
  return TrackedSyncDir(path, [&] { return base_->SyncDir(path); });
}

absl::StatusOr<std::vector<std::string>> FaultFileSystem::ListDir(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive());
  return base_->ListDir(path);
}

absl::StatusOr<uint64_t> FaultFileSystem::FileSize(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive());
  return base_->FileSize(path);
}

absl::StatusOr<uint64_t> FaultFileSystem::FreeBytes(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive());
  {
    MutexLock lock(&mu_);
    if (free_bytes_.has_value()) return *free_bytes_;
  }
  return base_->FreeBytes(path);
}

void FaultFileSystem::SetCrashAfter(int64_t k) {
  MutexLock lock(&mu_);
  crash_after_ = k;
}

void FaultFileSystem::InjectError(int64_t op, absl::Status error, bool persistent) {
  MutexLock lock(&mu_);
  inject_at_ = op;
  injected_ = std::move(error);
  inject_persistent_ = persistent;
}

void FaultFileSystem::SetFreeBytes(std::optional<uint64_t> bytes) {
  MutexLock lock(&mu_);
  free_bytes_ = bytes;
}

bool FaultFileSystem::crashed() const {
  MutexLock lock(&mu_);
  return crashed_;
}

int64_t FaultFileSystem::op_count() const {
  MutexLock lock(&mu_);
  return ops_;
}

std::vector<std::string> FaultFileSystem::op_log() const {
  MutexLock lock(&mu_);
  return op_log_;
}

void FaultFileSystem::ClearOpLog() {
  MutexLock lock(&mu_);
  op_log_.clear();
  ops_ = 0;
}

absl::Status FaultFileSystem::UndoDirOpsLocked() {
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    switch (it->kind) {
      case DirOp::kCreate:
        if (Exists(it->path) && ::unlink(it->path.c_str()) != 0) {
          return PosixError("undo create", it->path);
        }
        files_.erase(it->path);
        break;
      case DirOp::kRename:
        if (Exists(it->path) && ::rename(it->path.c_str(), it->from.c_str()) != 0) {
          return PosixError("undo rename", it->path);
        }
        files_.erase(it->path);
        if (it->from_state.has_value()) files_[it->from] = *it->from_state;
        if (it->saved.has_value()) RETURN_IF_ERROR(WriteWholeFile(it->path, *it->saved));
        break;
      case DirOp::kDelete:
        if (it->saved.has_value()) RETURN_IF_ERROR(WriteWholeFile(it->path, *it->saved));
        files_.erase(it->path);
        break;
    }
  }
  pending_.clear();
  return absl::OkStatus();
}

absl::Status FaultFileSystem::ResetDataLocked(CrashModel model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& [path, st] : files_) {
    if (!Exists(path) || st.size <= st.synced) continue;
    uint64_t keep = st.synced;
    if (model == CrashModel::kDropRandomTail) {
      keep = st.synced + rng() % (st.size - st.synced + 1);
    } else if (model == CrashModel::kWriteList) {
      for (const auto& [offset, length] : st.unsynced_writes) {
        const uint64_t choice = rng() % 4;
        if (choice == 0) {
          // Garbage over every sector the write touches, but never below the synced size:
          // we assume the device does not tear sectors that were already durable.
          const uint64_t sector = options_.sector_bytes;
          const uint64_t begin = std::max(offset / sector * sector, st.synced);
          const uint64_t end = std::min((offset + length + sector - 1) / sector * sector, st.size);
          if (end > begin) RETURN_IF_ERROR(Overwrite(path, begin, end - begin, &rng));
          keep = std::max(keep, end);
        } else if (choice % 2 == 1) {
          keep = std::max(keep, offset + length);
        } else if (length > 0) {
          RETURN_IF_ERROR(Overwrite(path, offset, length, nullptr));  // Dropped: a hole.
        }
      }
    }
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
      return PosixError("truncate", path);
    }
  }
  return absl::OkStatus();
}

absl::Status FaultFileSystem::SimulateCrash(CrashModel model, uint64_t seed) {
  MutexLock lock(&mu_);
  if (model == CrashModel::kLoseDirEntries) {
    RETURN_IF_ERROR(UndoDirOpsLocked());
  }
  RETURN_IF_ERROR(ResetDataLocked(model, seed));
  files_.clear();
  pending_.clear();
  crashed_ = false;
  crash_after_ = -1;
  inject_at_ = -1;
  injected_ = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace cairn::cache
