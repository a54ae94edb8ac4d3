#ifndef CAIRN_SERVICES_CACHE_DISK_FILE_SYSTEM_H_
#define CAIRN_SERVICES_CACHE_DISK_FILE_SYSTEM_H_

// The one seam through which every disk-tier file operation goes (docs/reliability.md §5.1),
// so that FaultFileSystem can record, fail and crash any of them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cairn::cache {

// A file opened for writing once, front to back. Thread-compatible.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes `data` at the current end (pwrite; every byte written or an error). Errors carry
  // the errno's code: ResourceExhausted for ENOSPC/EDQUOT, Unavailable for EIO.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes the data written so far durable (fdatasync). After a failure the file's contents
  // must never be trusted again (docs/reliability.md IO1).
  virtual absl::Status Sync() = 0;
  // Closes the descriptor; the result is checked (P2). Further calls fail.
  virtual absl::Status Close() = 0;
  virtual uint64_t size() const = 0;
};

// A file opened for positioned reads. Thread-safe.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads up to `dst.size()` bytes at `offset`; returns how many were read (fewer only at the
  // end of the file).
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const = 0;
};

// Paths are plain strings, absolute or relative to the process's working directory; the disk
// tier builds them from its root and names it validated itself.
// Thread safety: implementations are safe for concurrent use.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates `path`, which must not exist (AlreadyExists otherwise), for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` for reading; NotFound if absent.
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(
      const std::string& path) = 0;
  // Renames `from` to `to` (replacing `to`). Durable only after SyncDir of `to`'s directory.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Unlinks `path`; NotFound if absent. Durable only after SyncDir of its directory.
  virtual absl::Status Delete(const std::string& path) = 0;
  // Creates directory `path` if it does not exist.
  virtual absl::Status CreateDir(const std::string& path) = 0;
  // fsyncs directory `path`, making entries created, renamed or removed in it durable (P3).
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // Returns the names (not paths) of the entries of directory `path`, without "." and "..".
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Returns the size of `path` from stat; NotFound if absent.
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  // Returns what FileSize would for each entry `names[i]` of directory `dir`, in order. Start-up
  // checks thousands of files: the POSIX file system stats them relative to the directory,
  // on several threads. The default calls FileSize on each path.
  virtual std::vector<absl::StatusOr<uint64_t>> FileSizesIn(
      const std::string& dir, absl::Span<const absl::string_view> names);
  // Returns the bytes available to us on the file system holding `path` (statvfs).
  virtual absl::StatusOr<uint64_t> FreeBytes(const std::string& path) = 0;
};

// Returns the process-wide POSIX file system (never null, never destroyed).
FileSystem* PosixFileSystem();

// Returns "dir/name".
std::string JoinPath(absl::string_view dir, absl::string_view name);
// Returns the directory part of `path` ("." if none).
std::string DirName(absl::string_view path);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_FILE_SYSTEM_H_
