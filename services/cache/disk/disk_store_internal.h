#ifndef CAIRN_SERVICES_CACHE_DISK_DISK_STORE_INTERNAL_H_
#define CAIRN_SERVICES_CACHE_DISK_DISK_STORE_INTERNAL_H_

// Helpers shared by DiskStore's source files (disk_store.cc, disk_store_read.cc); not an API.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/cache/disk/file_system.h"

namespace cairn::cache::disk_internal {

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
