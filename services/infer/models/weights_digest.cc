#include "services/infer/models/weights_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "nlohmann/json.hpp"

namespace cairn::infer {
namespace {

// Read size for hashing files.
constexpr size_t kReadBytes = 4 << 20;

absl::StatusOr<uint64_t> HashFile(const std::string& path) {
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
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    CAIRN_LOG(WARNING) << "ignoring unreadable weights digest cache " << path;
    return nlohmann::json::object();
  }
  return j;
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
  for (const std::string& file : files) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot stat ", file));
    }
    const std::string key = std::filesystem::absolute(file).string();
    const int64_t size = st.st_size;
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                             st.st_mtim.tv_nsec;
    uint64_t digest = 0;
    const nlohmann::json* hit = cache.contains(key) ? &cache[key] : nullptr;
    if (hit != nullptr && hit->is_object() && hit->value("size", int64_t{-1}) == size &&
        hit->value("mtime_ns", int64_t{-1}) == mtime_ns && hit->contains("xxh3") &&
        (*hit)["xxh3"].is_number_unsigned()) {
      digest = (*hit)["xxh3"].get<uint64_t>();
    } else {
      absl::StatusOr<uint64_t> d = HashFile(file);
      if (!d.ok()) return d.status();
      digest = *d;
      cache[key] = {{"size", size}, {"mtime_ns", mtime_ns}, {"xxh3", digest}};
      changed = true;
    }
    all.Update(std::filesystem::path(file).filename().string());
    all.UpdateU64(static_cast<uint64_t>(size));
    all.UpdateU64(digest);
  }
  if (changed && !options.cache_path.empty()) WriteCache(options.cache_path, cache);
  return all.Digest();
}

}  // namespace cairn::infer
