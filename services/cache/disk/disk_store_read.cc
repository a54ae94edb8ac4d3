// DiskStore's read side: restores and verification (R4, R7).

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
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
  // The checkpoint's files in read order: the state file, then the chunks in manifest order.
  struct File {
    RestorePiece piece;
    std::string path;
    const ManifestFile* manifest_file = nullptr;
    FileHeader want;
    uint8_t* out = nullptr;  // Null for Verify: read through a staging buffer.
    absl::Status status;     // Of reading and verifying it; unknown until read.
    bool read = false;
  };
  std::vector<File> files(1 + m.chunks.size());
  {
    File& f = files[0];
    f.piece = RestorePiece{FileKind::kState, {}, m.sections, 0};
    for (const StateSection& s : m.sections) f.piece.bytes += s.bytes;
    f.path = StatePath(m.state_file.name);
    f.manifest_file = &m.state_file;
    f.want.kind = FileKind::kState;
    f.want.compat_hash = compat_hash;
    f.want.state = StateIdentity{checkpoint_id, m.depth, m.sections};
  }
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    const ManifestChunk& c = m.chunks[i];
    File& f = files[i + 1];
    f.piece = RestorePiece{FileKind::kChunk, c.id, {}, uint64_t{c.id.rows} * c.id.row_bytes};
    f.path = ChunkPath(c.file.name);
    f.manifest_file = &c.file;
    f.want.kind = FileKind::kChunk;
    f.want.compat_hash = compat_hash;
    f.want.chunk = c.id;
  }
  absl::Status status;
  // Where each piece goes, asked of the caller in read order before anything is read.
  if (destination != nullptr) {
    for (File& f : files) {
      absl::StatusOr<absl::Span<uint8_t>> dst = (*destination)(f.piece);
      if (dst.ok() && dst->size() != f.piece.bytes) {
        dst = absl::InvalidArgumentError("restore destination has the wrong size");
      }
      if (!dst.ok()) {
        status = dst.status();  // The caller's error, not the file's.
        break;
      }
      f.out = dst->data();
    }
  }
  // Restores read several files at once (restore_threads); Verify reads one at a time: the
  // scrubber paces its reads.
  const bool restore = destination != nullptr;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{!status.ok()};
  // Reads and verifies the files not yet claimed, one at a time, until none is left or one
  // fails. Runs on up to restore_threads threads; each file is read by one of them.
  auto read_files = [&] {
    std::string staging;  // Headers, footers and (for Verify) payload pieces; grows once.
    while (!failed.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= files.size()) return;
      File& f = files[i];
      f.status = ReadVerified(f.path, *f.manifest_file, f.want, f.piece.bytes, f.out, &staging);
      f.read = true;
      if (!f.status.ok()) failed.store(true);
    }
  };
  if (status.ok()) {
    const size_t threads =
        restore ? std::clamp<size_t>(options_.restore_threads, 1, files.size()) : 1;
    std::vector<std::thread> helpers;
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(read_files);
    read_files();
    for (std::thread& t : helpers) t.join();
  }
  // The first failure in read order is the answer; every bad file (corrupt or missing)
  // quarantines every checkpoint that lists it (R5). The copy read may be gone by now: another
  // read found it damaged and quarantined it, and the daemon may have published a new copy of
  // the same checkpoint (one still in RAM) under the same id, maybe with a lost chunk written
  // anew under its old chunk id. Only records that still name the files this read read are
  // touched: the old copy's damage, or its files deleted, says nothing about the new ones.
  std::set<uint64_t> dependents;
  bool damaged = false;
  bool replaced = false;
  bool delete_now = false;  // Deleted while read, and this was its last read.
  {
    MutexLock lock(&mu_);
    auto live = live_.find(checkpoint_id);
    const bool same_copy =
        live != live_.end() && live->second.manifest.state_file.name == m.state_file.name;
    replaced = live != live_.end() && !same_copy;
    for (size_t i = 0; i < files.size(); ++i) {
      const File& f = files[i];
      if (!f.read || f.status.ok()) continue;
      if (status.ok()) status = f.status;
      if (f.status.code() != absl::StatusCode::kDataLoss &&
          f.status.code() != absl::StatusCode::kNotFound) {
        continue;
      }
      damaged = true;
      if (same_copy) dependents.insert(checkpoint_id);  // Else quarantined already.
      if (i == 0) continue;
      auto it = chunks_.find(f.piece.chunk.chunk_id);
      if (it != chunks_.end() && it->second.entry.file.name == f.manifest_file->name) {
        dependents.insert(it->second.users.begin(), it->second.users.end());  // R5.
        // A publish that pinned it and has not registered yet fails instead of listing it.
        it->second.lost = true;
      }
    }
    if (same_copy) {  // A new copy's record has readers of its own.
      Record& record = live->second;
      if (--record.readers == 0 && record.delete_when_read) {
        record.delete_when_read = false;
        delete_now = true;
      }
    }
    ++counters_.restores;
    if (!status.ok()) ++counters_.restore_failures;
  }
  if (!dependents.empty()) {
    QuarantineCheckpoints(dependents, std::string(status.message())).IgnoreError();  // Logged.
  }
  // The read is over; the deletion it held back goes now (NotFound if quarantined instead).
  if (delete_now) FinishDeferredDelete(checkpoint_id);
  if (damaged && replaced) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_id,
                                            " was quarantined and written again while it was "
                                            "read: ",
                                            status.message()));
  }
  if (damaged) {
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
