#include "services/cache/disk/testing/rocksdb_fault_fs.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::cache {
namespace {

absl::Status ToAbsl(const rocksdb::IOStatus& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(s.ToString());
}

rocksdb::IOStatus ToIo(const absl::Status& s) {
  if (s.ok()) return rocksdb::IOStatus::OK();
  return rocksdb::IOStatus::IOError(std::string(s.message()));
}

class FaultRocksWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultRocksWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path,
                         FaultFileSystem* fault)
      : FSWritableFileOwnerWrapper(std::move(file)), path_(std::move(path)), fault_(fault) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedAppend(
        path_, data.size(), [&] { return ToAbsl(target()->Append(data, options, dbg)); }));
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedAppend(
        path_, data.size(), [&] { return ToAbsl(target()->Append(data, options, info, dbg)); }));
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedSync(path_, [&] { return ToAbsl(target()->Sync(options, dbg)); }));
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    return ToIo(
        fault_->TrackedSync(path_, [&] { return ToAbsl(target()->Fsync(options, dbg)); }));
  }
  rocksdb::IOStatus RangeSync(uint64_t /*offset*/, uint64_t /*nbytes*/,
                              const rocksdb::IOOptions& /*options*/,
                              rocksdb::IODebugContext* /*dbg*/) override {
    // sync_file_range gives no durability (IO6); report success without a durability effect.
    return ToIo(fault_->CheckAlive());
  }

 private:
  const std::string path_;
  FaultFileSystem* const fault_;
};

class FaultRocksDirectory final : public rocksdb::FSDirectoryWrapper {
 public:
  FaultRocksDirectory(std::unique_ptr<rocksdb::FSDirectory> dir, std::string path,
                      FaultFileSystem* fault)
      : FSDirectoryWrapper(std::move(dir)), path_(std::move(path)), fault_(fault) {}

  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedSyncDir(
        path_, [&] { return ToAbsl(FSDirectoryWrapper::Fsync(options, dbg)); }));
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& options,
                                        rocksdb::IODebugContext* dbg,
                                        const rocksdb::DirFsyncOptions& dir_options) override {
    return ToIo(fault_->TrackedSyncDir(path_, [&] {
      return ToAbsl(FSDirectoryWrapper::FsyncWithDirOptions(options, dbg, dir_options));
    }));
  }

 private:
  const std::string path_;
  FaultFileSystem* const fault_;
};

std::string StripTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

class RocksDbFaultFs final : public rocksdb::FileSystemWrapper {
 public:
  explicit RocksDbFaultFs(FaultFileSystem* fault)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), fault_(fault) {}

  const char* Name() const override { return "CairnRocksDbFaultFs"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname,
                                    const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = ToIo(fault_->TrackedCreate(
        fname, [&] { return ToAbsl(target()->NewWritableFile(fname, options, result, dbg)); }));
    if (!s.ok()) return s;
    *result = std::make_unique<FaultRocksWritableFile>(std::move(*result), fname, fault_);
    return s;
  }

  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    // Log recycling is off in the catalog's options; refuse rather than bypass the tracker.
    (void)fname, (void)old_fname, (void)options, (void)result, (void)dbg;
    return rocksdb::IOStatus::NotSupported("log recycling is not supported by the fault fs");
  }

  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = ToIo(fault_->CheckAlive());
    if (s.ok()) s = target()->NewDirectory(name, options, result, dbg);
    if (!s.ok()) return s;
    *result =
        std::make_unique<FaultRocksDirectory>(std::move(*result), StripTrailingSlash(name), fault_);
    return s;
  }

  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedRename(
        src, dst, [&] { return ToAbsl(target()->RenameFile(src, dst, options, dbg)); }));
  }

  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    return ToIo(fault_->TrackedDelete(
        fname, [&] { return ToAbsl(target()->DeleteFile(fname, options, dbg)); }));
  }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname,
                                        const rocksdb::FileOptions& options,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = ToIo(fault_->CheckAlive());
    return s.ok() ? target()->NewRandomAccessFile(fname, options, result, dbg) : s;
  }

  rocksdb::IOStatus NewSequentialFile(const std::string& fname,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = ToIo(fault_->CheckAlive());
    return s.ok() ? target()->NewSequentialFile(fname, options, result, dbg) : s;
  }

 private:
  FaultFileSystem* const fault_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewRocksDbFaultFs(FaultFileSystem* fault) {
  // shared_ptr: RocksDB's Env API takes shared ownership of its file system.
  return std::make_shared<RocksDbFaultFs>(fault);
}

}  // namespace cairn::cache
