// DiskStore's read side: restores and verification (R4, R7).

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/disk_store_internal.h"

namespace cairn::cache {

using disk_internal::Corrupt;
using disk_internal::ReadSmallFile;

// ---------------------------------------------------------------------------------------------
// Restore (R4).

absl::Status DiskStore::ReadVerified(const std::string& path, const ManifestFile& expected,
                                     const FileHeader& want, uint64_t payload_bytes,
                                     uint8_t* destination, std::string* staging) {
  ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(path));
  if (size != expected.length) {
    return Corrupt(path, absl::StrCat("size ", size, ", manifest says ", expected.length));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, fs_->NewReadableFile(path));
  auto read_into = [&](uint64_t offset, uint8_t* out, size_t n) -> absl::Status {
    ASSIGN_OR_RETURN(size_t got, file->ReadAt(offset, absl::Span<uint8_t>(out, n)));
    if (got != n) return Corrupt(path, "short read");
    return absl::OkStatus();
  };
  auto read = [&](uint64_t offset, size_t n) -> absl::StatusOr<absl::string_view> {
    if (n > staging->size()) staging->resize(n);
    RETURN_IF_ERROR(read_into(offset, reinterpret_cast<uint8_t*>(staging->data()), n));
    return absl::string_view(staging->data(), n);
  };
  if (size < kFileFixedHeaderBytes + kFileFooterBytes) return Corrupt(path, "file too short");
  ASSIGN_OR_RETURN(absl::string_view prefix, read(0, kFileFixedHeaderBytes));
  ASSIGN_OR_RETURN(uint64_t header_bytes, PeekHeaderBytes(prefix));
  if (header_bytes > size - kFileFooterBytes) return Corrupt(path, "header past the end");
  ASSIGN_OR_RETURN(absl::string_view header_bytes_view, read(0, header_bytes));
  ASSIGN_OR_RETURN(FileHeader header, DecodeFileHeader(header_bytes_view));
  const bool identity_ok =
      header.kind == want.kind && header.compat_hash == want.compat_hash &&
      (header.kind == FileKind::kChunk ? header.chunk == want.chunk : header.state == want.state);
  if (!identity_ok) return Corrupt(path, "identity or position does not match the manifest");
  if (header.payload_bytes != payload_bytes ||
      header_bytes + header.payload_bytes + kFileFooterBytes != size) {
    return Corrupt(path, "payload size does not match");
  }
  Xxh3Stream hash;
  hash.Update(header_bytes_view);
  // The payload is read straight into the destination (no staging copy), one staging-sized
  // piece at a time so that each piece is hashed while it is still in the CPU's caches. Until
  // the footer is checked the destination holds unverified bytes, which is why a failed
  // restore's destination must not be used (Restore's contract).
  uint64_t done = 0;
  while (done < header.payload_bytes) {
    const size_t n = std::min<uint64_t>(options_.staging_bytes, header.payload_bytes - done);
    if (destination != nullptr) {
      RETURN_IF_ERROR(read_into(header_bytes + done, destination + done, n));
      hash.Update(destination + done, n);
    } else {
      ASSIGN_OR_RETURN(absl::string_view piece, read(header_bytes + done, n));
      hash.Update(piece);
    }
    done += n;
  }
  ASSIGN_OR_RETURN(absl::string_view footer, read(header_bytes + done, kFileFooterBytes));
  ASSIGN_OR_RETURN(uint64_t stored, DecodeFooter(footer));
  const uint64_t computed = hash.Digest();
  if (stored != computed || computed != expected.checksum) {
    return Corrupt(path, "checksum mismatch");
  }
  return absl::OkStatus();
}

absl::Status DiskStore::Restore(uint64_t checkpoint_id, const RestoreDestination& destination) {
  return Load(checkpoint_id, &destination);
}

absl::Status DiskStore::Verify(uint64_t checkpoint_id) { return Load(checkpoint_id, nullptr); }

absl::Status DiskStore::Load(uint64_t checkpoint_id, const RestoreDestination* destination) {
  Manifest m;
  {
    MutexLock lock(&mu_);
    auto it = live_.find(checkpoint_id);
    if (it == live_.end() || it->second.deleting) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_id, " not on disk"));
    }
    m = ManifestLocked(it->second);
    ++it->second.readers;
  }
  const uint64_t compat_hash = CompatHash(m.compat_digest);
  std::set<uint64_t> dependents;  // To quarantine if a file is bad.
  absl::Status status;
  std::string staging;  // Headers, footers and (for Verify) payload pieces; grows once.
  // Reads one file of the checkpoint into the destination the caller gives for `piece`.
  auto load_piece = [&](const RestorePiece& piece, const std::string& path,
                        const ManifestFile& file, const FileHeader& want) -> bool {
    uint8_t* out = nullptr;
    if (destination != nullptr) {
      absl::StatusOr<absl::Span<uint8_t>> dst = (*destination)(piece);
      if (dst.ok() && dst->size() != piece.bytes) {
        dst = absl::InvalidArgumentError("restore destination has the wrong size");
      }
      if (!dst.ok()) {
        status = dst.status();  // The caller's error, not the file's.
        return false;
      }
      out = dst->data();
    }
    status = ReadVerified(path, file, want, piece.bytes, out, &staging);
    return status.ok();
  };
  // Restores read ahead (options_.restore_read_ahead_bytes): before each file, the files up
  // to that many bytes past it are handed to FileSystem::WillRead, in the order they are read.
  // Verify does not: the scrubber paces its reads.
  std::vector<std::pair<std::string, uint64_t>> ahead;  // Path and length, in read order.
  size_t hinted = 0;
  uint64_t hinted_bytes = 0, read_bytes = 0;  // Up to and including the file being read.
  if (destination != nullptr && options_.restore_read_ahead_bytes > 0) {
    ahead.emplace_back(StatePath(m.state_file.name), m.state_file.length);
    for (const ManifestChunk& c : m.chunks)
      ahead.emplace_back(ChunkPath(c.file.name), c.file.length);
  }
  auto read_ahead = [&](size_t file) {  // Before reading file `file` (0: the state file).
    if (file < ahead.size()) read_bytes += ahead[file].second;  // This file counts as read.
    while (hinted < ahead.size() &&
           (hinted <= file || hinted_bytes - read_bytes < options_.restore_read_ahead_bytes)) {
      fs_->WillRead(ahead[hinted].first);
      hinted_bytes += ahead[hinted].second;
      ++hinted;
    }
  };
  auto is_bad_file = [&] {
    return status.code() == absl::StatusCode::kDataLoss ||
           status.code() == absl::StatusCode::kNotFound;
  };
  {
    FileHeader want;
    want.kind = FileKind::kState;
    want.compat_hash = compat_hash;
    want.state = StateIdentity{checkpoint_id, m.depth, m.sections};
    RestorePiece piece{FileKind::kState, {}, m.sections, 0};
    for (const StateSection& s : m.sections) piece.bytes += s.bytes;
    read_ahead(0);
    if (!load_piece(piece, StatePath(m.state_file.name), m.state_file, want) && is_bad_file()) {
      dependents.insert(checkpoint_id);
    }
  }
  for (size_t i = 0; status.ok() && i < m.chunks.size(); ++i) {
    const ManifestChunk& c = m.chunks[i];
    FileHeader want;
    want.kind = FileKind::kChunk;
    want.compat_hash = compat_hash;
    want.chunk = c.id;
    RestorePiece piece{FileKind::kChunk, c.id, {}, uint64_t{c.id.rows} * c.id.row_bytes};
    read_ahead(i + 1);
    if (!load_piece(piece, ChunkPath(c.file.name), c.file, want) && is_bad_file()) {
      MutexLock lock(&mu_);
      auto it = chunks_.find(c.id.chunk_id);
      if (it != chunks_.end()) {  // R5: every dependent.
        dependents.insert(it->second.users.begin(), it->second.users.end());
      }
      dependents.insert(checkpoint_id);
    }
  }
  {
    MutexLock lock(&mu_);
    if (auto it = live_.find(checkpoint_id); it != live_.end()) --it->second.readers;
    ++counters_.restores;
    if (!status.ok()) ++counters_.restore_failures;
  }
  if (!dependents.empty()) {
    QuarantineCheckpoints(dependents, std::string(status.message())).IgnoreError();  // Logged.
    return absl::DataLossError(absl::StrCat("checkpoint ", checkpoint_id, ": ", status.message()));
  }
  if (!status.ok()) NoteIoError(status, false).IgnoreError();  // Counted towards IO4.
  return status;
}

absl::StatusOr<Manifest> DiskStore::GetManifest(uint64_t checkpoint_id) const {
  {
    MutexLock lock(&mu_);
    if (live_.count(checkpoint_id) == 0) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_id, " not on disk"));
    }
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(fs_, ManifestPath(checkpoint_id),
                                                    FormatLimits::kMaxManifestBytes));
  return DecodeManifest(bytes);
}

}  // namespace cairn::cache
