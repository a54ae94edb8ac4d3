#ifndef CAIRN_SERVICES_CACHE_DISK_DISK_STORE_INTERNAL_H_
#define CAIRN_SERVICES_CACHE_DISK_DISK_STORE_INTERNAL_H_

// Helpers shared by DiskStore's source files (disk_store.cc, disk_store_read.cc,
// disk_store_recovery.cc); not an API.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/cache/disk/file_system.h"

namespace cairn::cache::disk_internal {

inline constexpr char kManifestSuffix[] = ".manifest";
inline constexpr char kTmpSuffix[] = ".tmp";

// 16 lower-case hex digits (what "%016x" gives; start-up names 10,000s of manifests).
inline std::string Hex(uint64_t v) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = "0123456789abcdef"[v & 0xf];
  return out;
}

inline std::string ManifestName(uint64_t checkpoint_id) {
  return absl::StrCat("m-", Hex(checkpoint_id), kManifestSuffix);
}

// Parses "m-<16 hex>.manifest"; false for any other name.
inline bool ParseManifestName(absl::string_view name, uint64_t* checkpoint_id) {
  if (name.size() != 2 + 16 + sizeof(kManifestSuffix) - 1 || !absl::StartsWith(name, "m-") ||
      !absl::EndsWith(name, kManifestSuffix)) {
    return false;
  }
  return absl::SimpleHexAtoi(name.substr(2, 16), checkpoint_id);
}

inline absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Reads a whole small file (manifests), bounded by `max_bytes`.
inline absl::StatusOr<std::string> ReadSmallFile(FileSystem* fs, const std::string& path,
                                                 uint64_t max_bytes) {
  ASSIGN_OR_RETURN(uint64_t size, fs->FileSize(path));
  if (size > max_bytes) return Corrupt(path, absl::StrCat("file of ", size, " bytes"));
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, fs->NewReadableFile(path));
  std::string bytes(size, '\0');
  ASSIGN_OR_RETURN(
      size_t n,
      file->ReadAt(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size())));
  if (n != size) return Corrupt(path, "short read");
  return bytes;
}

}  // namespace cairn::cache::disk_internal

#endif  // CAIRN_SERVICES_CACHE_DISK_DISK_STORE_INTERNAL_H_
