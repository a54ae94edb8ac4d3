#include "services/infer/models/weights_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/json/json_scan.h"
#include "common/log/log.h"
#include "nlohmann/json.hpp"

namespace cairn::infer {
namespace {

// Read size for hashing files.
constexpr size_t kReadBytes = 4 << 20;

// Reports `done` of `total` bytes hashed at most every kProgressBytes, and the last step.
constexpr int64_t kProgressBytes = int64_t{256} << 20;
constexpr absl::string_view kHashPhase = "hashing the weights";

struct HashProgress {
  const LoadProgressFn* fn;
  int64_t done;
  int64_t total;
  int64_t reported;
  void Report(bool force) {
    if (*fn == nullptr || (!force && done - reported < kProgressBytes)) return;
    reported = done;
    (*fn)({.phase = kHashPhase, .done = done, .total = total, .unit = "bytes"});
  }
};

absl::StatusOr<uint64_t> HashFile(const std::string& path, HashProgress& progress) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  Xxh3Stream stream;
  std::vector<char> buf(kReadBytes);
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("read error in ", path));
    }
    if (n == 0) break;
    stream.Update(buf.data(), static_cast<size_t>(n));
    // A file that grew since its stat is not the size counted: the total stays the bound.
    progress.done = std::min(progress.total, progress.done + n);
    progress.Report(false);
  }
  ::close(fd);
  return stream.Digest();
}

nlohmann::json ReadCache(const std::string& path) {
  if (path.empty()) return nlohmann::json::object();
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  std::stringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  nlohmann::json j = FileJsonTooDeep(body) ? nlohmann::json(nlohmann::json::value_t::discarded)
                                           : nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    CAIRN_LOG(WARNING) << "ignoring unreadable weights digest cache " << path;
    return nlohmann::json::object();
  }
  return j;
}

// Whether `entry` (an object) holds `key` as an integer equal to `want`. A field of another type
// (a cache edited by hand) is a miss: nlohmann's value() would throw on it.
bool IntegerIs(const nlohmann::json& entry, const char* key, int64_t want) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number_integer()) return false;
  return it->is_number_unsigned() ? it->get<uint64_t>() == static_cast<uint64_t>(want) && want >= 0
                                  : it->get<int64_t>() == want;
}

void WriteCache(const std::string& path, const nlohmann::json& cache) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << cache.dump(1);
    if (!out) {
      CAIRN_LOG(WARNING) << "cannot write weights digest cache " << tmp;
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) CAIRN_LOG(WARNING) << "cannot replace weights digest cache " << path;
}

}  // namespace

absl::StatusOr<uint64_t> ComputeWeightsDigest(const std::vector<std::string>& files,
                                              const WeightsDigestOptions& options) {
  nlohmann::json cache = ReadCache(options.cache_path);
  bool changed = false;
  Xxh3Stream all;
  // Each file's size and modification time, and whether the cache holds its digest: the
  // bytes to read are known before the first is read.
  struct FileState {
    std::string key;  // The file's absolute path, the cache's key.
    int64_t size;
    int64_t mtime_ns;
    const nlohmann::json* hit;
  };
  std::vector<FileState> states;
  HashProgress progress{.fn = &options.progress, .done = 0, .total = 0, .reported = 0};
  for (const std::string& file : files) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot stat ", file));
    }
    const std::string key = std::filesystem::absolute(file).string();
    const int64_t size = st.st_size;
    const int64_t mtime_ns =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    const nlohmann::json* hit = cache.contains(key) ? &cache[key] : nullptr;
    if (hit != nullptr && (!hit->is_object() || !IntegerIs(*hit, "size", size) ||
                           !IntegerIs(*hit, "mtime_ns", mtime_ns) || !hit->contains("xxh3") ||
                           !(*hit)["xxh3"].is_number_unsigned())) {
      hit = nullptr;
    }
    if (hit == nullptr) progress.total += size;
    states.push_back({key, size, mtime_ns, hit});
  }
  if (progress.total > 0) progress.Report(true);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& file = files[i];
    const auto& [key, size, mtime_ns, hit] = states[i];
    uint64_t digest = 0;
    if (hit != nullptr) {
      digest = (*hit)["xxh3"].get<uint64_t>();
    } else {
      absl::StatusOr<uint64_t> d = HashFile(file, progress);
      if (!d.ok()) return d.status();
      digest = *d;
      cache[key] = {{"size", size}, {"mtime_ns", mtime_ns}, {"xxh3", digest}};
      changed = true;
    }
    all.Update(std::filesystem::path(file).filename().string());
    all.UpdateU64(static_cast<uint64_t>(size));
    all.UpdateU64(digest);
  }
  if (progress.total > 0) {
    progress.done = progress.total;
    progress.Report(true);
  }
  if (changed && !options.cache_path.empty()) WriteCache(options.cache_path, cache);
  return all.Digest();
}

}  // namespace cairn::infer
