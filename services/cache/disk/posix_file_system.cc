// The POSIX FileSystem: pwrite, fdatasync, rename, unlink, directory fsync; every result
// checked (docs/reliability.md P1-P3, IO1-IO2).

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shm/unique_fd.h"
#include "services/cache/disk/file_system.h"

namespace cairn::cache {
namespace {

constexpr size_t kMaxStatThreads = 4;

absl::Status ErrnoStatus(int error, absl::string_view op, absl::string_view path) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(op, " ", path, ": ", std::strerror(error)));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  ~PosixWritableFile() override {
    // An unclosed file was abandoned after an error; its contents are never trusted.
    fd_.Reset();
  }

  absl::Status Append(absl::string_view data) override {
    if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    while (!data.empty()) {
      ssize_t n = ::pwrite(fd_.get(), data.data(), data.size(), static_cast<off_t>(size_));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "pwrite", path_);
      }
      if (n == 0) return ErrnoStatus(ENOSPC, "pwrite", path_);
      size_ += static_cast<uint64_t>(n);
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    if (::fdatasync(fd_.get()) != 0) return ErrnoStatus(errno, "fdatasync", path_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    const int fd = fd_.Release();
    if (::close(fd) != 0) return ErrnoStatus(errno, "close", path_);
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n = ::pread(fd_.get(), dst.data() + done, dst.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "pread", path_);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  const std::string path_;
  UniqueFd fd_;
};

class PosixFs final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
    if (!fd.valid()) return ErrnoStatus(errno, "create", path);
    return std::make_unique<PosixWritableFile>(path, std::move(fd));
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return ErrnoStatus(errno, "open", path);
    return std::make_unique<PosixReadableFile>(path, std::move(fd));
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus(errno, "rename", from);
    return absl::OkStatus();
  }

  absl::Status Delete(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus(errno, "unlink", path);
    return absl::OkStatus();
  }

  absl::Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0750) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "mkdir", path);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus(errno, "open directory", path);
    if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync directory", path);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus(errno, "opendir", path);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* entry = ::readdir(dir)) {
      const absl::string_view name(entry->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    const int error = errno;
    ::closedir(dir);
    if (error != 0) return ErrnoStatus(error, "readdir", path);
    return names;
  }

  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
    }
    return static_cast<uint64_t>(st.st_size);
  }

  std::vector<absl::StatusOr<uint64_t>> FileSizesIn(
      const std::string& dir, absl::Span<const absl::string_view> names) override {
    std::vector<absl::StatusOr<uint64_t>> sizes(names.size(), absl::UnknownError("not stat'ed"));
    UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd.valid()) {
      const absl::Status s = ErrnoStatus(errno, "open directory", dir);
      for (auto& size : sizes) size = s;
      return sizes;
    }
    auto stat_range = [&](size_t begin, size_t end) {
      char name[NAME_MAX + 1];
      for (size_t i = begin; i < end; ++i) {
        const absl::string_view n = names[i];
        if (n.empty() || n.size() > NAME_MAX || n.find('/') != absl::string_view::npos) {
          sizes[i] = absl::InvalidArgumentError(absl::StrCat("bad file name ", n, " in ", dir));
          continue;
        }
        std::memcpy(name, n.data(), n.size());
        name[n.size()] = '\0';
        struct stat st;
        if (::fstatat(dir_fd.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          sizes[i] = ErrnoStatus(errno, "stat", JoinPath(dir, n));
        } else if (!S_ISREG(st.st_mode)) {
          sizes[i] = absl::FailedPreconditionError(
              absl::StrCat(JoinPath(dir, n), " is not a regular file"));
        } else {
          sizes[i] = static_cast<uint64_t>(st.st_size);
        }
      }
    };
    // Stats are mostly path lookups in the kernel's caches: they scale with threads.
    constexpr size_t kPerThread = 2048;
    const size_t threads =
        std::min<size_t>({kMaxStatThreads, (names.size() + kPerThread - 1) / kPerThread,
                          std::max(1u, std::thread::hardware_concurrency())});
    if (threads <= 1) {
      stat_range(0, names.size());
      return sizes;
    }
    std::vector<std::thread> workers;
    const size_t per = (names.size() + threads - 1) / threads;
    for (size_t t = 1; t < threads; ++t) {
      workers.emplace_back(stat_range, t * per, std::min(names.size(), (t + 1) * per));
    }
    stat_range(0, std::min(names.size(), per));
    for (std::thread& w : workers) w.join();
    return sizes;
  }

  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override {
    struct statvfs st;
    if (::statvfs(path.c_str(), &st) != 0) return ErrnoStatus(errno, "statvfs", path);
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
};

}  // namespace

std::vector<absl::StatusOr<uint64_t>> FileSystem::FileSizesIn(
    const std::string& dir, absl::Span<const absl::string_view> names) {
  std::vector<absl::StatusOr<uint64_t>> sizes;
  sizes.reserve(names.size());
  for (absl::string_view name : names) sizes.push_back(FileSize(JoinPath(dir, name)));
  return sizes;
}

FileSystem* PosixFileSystem() {
  static FileSystem* const fs = new PosixFs();  // Never destroyed: no static destructor.
  return fs;
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

std::string DirName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace cairn::cache
