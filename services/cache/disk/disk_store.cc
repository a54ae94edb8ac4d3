#include "services/cache/disk/disk_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/shm/arena_handle.h"
#include "common/status/annotate.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/disk/disk_store_internal.h"
#include "services/cache/disk/kill_point.h"

namespace cairn::cache {
namespace {

using disk_internal::Hex;
using disk_internal::kManifestSuffix;
using disk_internal::kTmpSuffix;
using disk_internal::ManifestName;

// True for errors that count towards IO4. Not for ENOSPC/EDQUOT (ResourceExhausted), which
// fail the publish cleanly so the caller's policy can evict by rank and retry (IO5), unless
// an fsync reported them.
bool IsIoError(const absl::Status& s) {
  return !s.ok() && s.code() != absl::StatusCode::kNotFound &&
         s.code() != absl::StatusCode::kResourceExhausted &&
         s.code() != absl::StatusCode::kDataLoss &&
         s.code() != absl::StatusCode::kInvalidArgument &&
         s.code() != absl::StatusCode::kAlreadyExists;
}

// The refusal of a publish of `checkpoint_id` whose shared chunk `chunk_id` was lost (R5).
absl::Status LostWhileWritten(uint64_t chunk_id, uint64_t checkpoint_id) {
  return absl::DataLossError(absl::StrCat("shared chunk ", chunk_id,
                                          " was found damaged while checkpoint ", checkpoint_id,
                                          " was written"));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and the tables (reconciliation, R1 and R2, is in disk_store_recovery.cc).

DiskStore::DiskStore(const DiskStoreOptions& options, FileSystem* fs, uint64_t incarnation)
    : options_(options),
      fs_(fs),
      incarnation_(incarnation),
      clock_(options.clock != nullptr ? options.clock : RealClock::Get()),
      chunks_dir_(JoinPath(options.root, "chunks")),
      states_dir_(JoinPath(options.root, "states")),
      manifests_dir_(JoinPath(options.root, "manifests")),
      quarantine_dir_(JoinPath(options.root, "quarantine")),
      catalog_dir_(JoinPath(options.root, "catalog")) {}

DiskStore::~DiskStore() = default;

absl::StatusOr<std::unique_ptr<DiskStore>> DiskStore::Create(const DiskStoreOptions& options,
                                                             FileSystem* fs) {
  if (options.root.empty()) return absl::InvalidArgumentError("disk tier root is empty");
  if (options.staging_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("staging buffer of ", options.staging_bytes, " bytes is below 4 KiB"));
  }
  const uint64_t incarnation = options.incarnation != 0 ? options.incarnation : NewIncarnation();
  std::unique_ptr<DiskStore> store(new DiskStore(options, fs, incarnation));
  RETURN_IF_ERROR(Annotate(store->Reconcile(), absl::StrCat("opening disk tier ", options.root)));
  return store;
}

std::string DiskStore::ChunkPath(const std::string& name) const {
  return JoinPath(chunks_dir_, name);
}
std::string DiskStore::StatePath(const std::string& name) const {
  return JoinPath(states_dir_, name);
}
std::string DiskStore::ManifestPath(uint64_t checkpoint_id) const {
  return JoinPath(manifests_dir_, ManifestName(checkpoint_id));
}

absl::Status DiskStore::CheckSameChunkLocked(uint64_t checkpoint_id, const ManifestChunk& c) const {
  auto it = chunks_.find(c.id.chunk_id);
  if (it != chunks_.end() && !(it->second.entry == c)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", checkpoint_id, " lists chunk ",
                                                      c.id.chunk_id,
                                                      " differently from another manifest"));
  }
  return absl::OkStatus();
}

absl::Status DiskStore::RegisterLocked(const Manifest& m, uint64_t manifest_bytes) {
  for (const ManifestChunk& c : m.chunks) {
    RETURN_IF_ERROR(CheckSameChunkLocked(m.checkpoint_id, c));
  }
  Record r = RecordOf(m, manifest_bytes);
  r.chunk_ids.reserve(m.chunks.size());
  for (const ManifestChunk& c : m.chunks) {
    auto [it, inserted] = chunks_.try_emplace(c.id.chunk_id);
    if (inserted) {
      it->second.entry = c;
      used_bytes_ += c.file.length;
    }
    it->second.AddUser(m.checkpoint_id);
    max_chunk_id_ = std::max(max_chunk_id_, c.id.chunk_id);
    r.chunk_ids.push_back(c.id.chunk_id);
  }
  AddRecordLocked(m, std::move(r));
  return absl::OkStatus();
}

DiskStore::Record DiskStore::RecordOf(const Manifest& m, uint64_t manifest_bytes) {
  Record r;
  r.manifest.checkpoint_id = m.checkpoint_id;
  r.manifest.generation = m.generation;
  r.manifest.depth = m.depth;
  r.manifest.compat_digest = m.compat_digest;
  r.manifest.input_digest = m.input_digest;
  r.manifest.token_hash = m.token_hash;
  r.manifest.state_file = m.state_file;
  r.manifest.sections = m.sections;
  r.manifest.capture_kind = m.capture_kind;
  r.manifest_bytes = manifest_bytes;
  return r;
}

void DiskStore::AddRecordLocked(const Manifest& m, Record r) {
  used_bytes_ += m.state_file.length + r.manifest_bytes;
  max_checkpoint_id_ = std::max(max_checkpoint_id_, m.checkpoint_id);
  next_generation_ = std::max(next_generation_, m.generation + 1);
  live_.insert_or_assign(m.checkpoint_id, std::move(r));
}

const ManifestChunk& DiskStore::ChunkEntryLocked(uint64_t chunk_id) const {
  auto it = chunks_.find(chunk_id);
  CAIRN_CHECK(it != chunks_.end());  // A chunk stays in chunks_ while a live record lists it.
  return it->second.entry;
}

Manifest DiskStore::ManifestLocked(const Record& r) const {
  Manifest m = r.manifest;
  m.chunks.reserve(r.chunk_ids.size());
  for (uint64_t id : r.chunk_ids) m.chunks.push_back(ChunkEntryLocked(id));
  return m;
}

// ---------------------------------------------------------------------------------------------
// Publication (P1-P8).

absl::Status DiskStore::ValidateRequest(const PublishRequest& r) const {
  if (r.tokens.empty() || r.tokens.size() > FormatLimits::kMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", r.checkpoint_id, " has ", r.tokens.size(), " tokens"));
  }
  if (r.compat_digest.empty() || r.compat_digest.size() > FormatLimits::kMaxString ||
      r.input_digest.size() > FormatLimits::kMaxString) {
    return absl::InvalidArgumentError("compatibility or input digest is empty or too long");
  }
  if (r.capture_kind > FormatLimits::kMaxCaptureKind) {
    return absl::InvalidArgumentError(
        absl::StrCat("capture_kind ", r.capture_kind, " is above ", FormatLimits::kMaxCaptureKind));
  }
  if (r.new_chunks.size() + r.shared_chunk_ids.size() > FormatLimits::kMaxChunks ||
      r.sections.size() > FormatLimits::kMaxSections) {
    return absl::InvalidArgumentError("too many chunks or state sections");
  }
  uint64_t state_bytes = 0;
  for (const StateSection& s : r.sections) {
    if (s.bytes > FormatLimits::kMaxPayloadBytes - state_bytes) {
      return absl::InvalidArgumentError("state sections overflow");
    }
    state_bytes += s.bytes;
  }
  if (state_bytes != r.state.size()) {
    return absl::InvalidArgumentError(absl::StrCat("state sections add up to ", state_bytes,
                                                   " bytes but the state has ", r.state.size()));
  }
  std::set<uint64_t> ids(r.shared_chunk_ids.begin(), r.shared_chunk_ids.end());
  if (ids.size() != r.shared_chunk_ids.size()) {
    return absl::InvalidArgumentError("a shared chunk id is repeated");
  }
  for (const ChunkWrite& c : r.new_chunks) {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(uint64_t{c.id.rows}, c.id.row_bytes, &bytes) ||
        bytes != c.bytes.size() || bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.id.chunk_id, " has ",
                                                     c.bytes.size(), " bytes for ", c.id.rows,
                                                     " rows of ", c.id.row_bytes));
    }
    if (!ids.insert(c.id.chunk_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.id.chunk_id, " is repeated"));
    }
  }
  return absl::OkStatus();
}

absl::Status DiskStore::NoteIoError(absl::Status s, bool sync_failure) {
  if (s.ok() || (!IsIoError(s) && !sync_failure)) return s;
  MutexLock lock(&mu_);
  const absl::Duration now = clock_->MonotonicNow();
  recent_errors_.push_back(now);
  recent_errors_.erase(
      std::remove_if(recent_errors_.begin(), recent_errors_.end(),
                     [&](absl::Duration t) { return now - t > options_.io_error_window; }),
      recent_errors_.end());
  if (!read_only_ &&
      (sync_failure || static_cast<int>(recent_errors_.size()) >= options_.io_error_limit)) {
    read_only_ = true;
    // IO1/IO4: never retry an fsync and trust it; stop publishing, keep serving reads.
    CAIRN_LOG(ERROR) << "ALERT: disk tier " << options_.root
                     << " is now read-only after an I/O failure: " << s;
  }
  return s;
}

void DiskStore::DeleteBestEffort(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    absl::Status s = fs_->Delete(path);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      CAIRN_LOG(WARNING) << "cannot delete " << path << ": " << s;  // The sweep retries.
    }
  }
}

absl::StatusOr<ManifestFile> DiskStore::WriteDataFile(const std::string& dir,
                                                      const std::string& name,
                                                      const std::string& header,
                                                      absl::Span<const uint8_t> payload,
                                                      const std::function<void()>& between_pieces) {
  const std::string path = JoinPath(dir, name);
  absl::StatusOr<std::unique_ptr<WritableFile>> created = fs_->NewWritableFile(path);
  RETURN_IF_ERROR(NoteIoError(created.status(), false));
  std::unique_ptr<WritableFile> file = *std::move(created);
  Xxh3Stream hash;
  std::string staging;
  staging.reserve(options_.staging_bytes);
  staging.append(header);
  hash.Update(header);
  size_t done = 0;
  do {
    const size_t n = std::min<size_t>(
        payload.size() - done,
        options_.staging_bytes - std::min<size_t>(staging.size(), options_.staging_bytes));
    staging.append(reinterpret_cast<const char*>(payload.data()) + done, n);
    hash.Update(payload.data() + done, n);
    done += n;
    if (done == payload.size()) staging.append(EncodeFooter(hash.Digest()));
    RETURN_IF_ERROR(NoteIoError(file->Append(staging), false));
    staging.clear();
    if (done < payload.size() && between_pieces) between_pieces();
  } while (done < payload.size());
  RETURN_IF_ERROR(NoteIoError(file->Sync(), /*sync_failure=*/true));  // P2.
  RETURN_IF_ERROR(NoteIoError(file->Close(), false));
  return ManifestFile{name, file->size(), hash.Digest()};
}

absl::Status DiskStore::WriteManifest(const Manifest& manifest, const std::string& tmp_path,
                                      const std::string& final_path) {
  const std::string bytes = EncodeManifest(manifest);
  absl::StatusOr<std::unique_ptr<WritableFile>> created = fs_->NewWritableFile(tmp_path);  // P4.
  RETURN_IF_ERROR(NoteIoError(created.status(), false));
  std::unique_ptr<WritableFile> file = *std::move(created);
  RETURN_IF_ERROR(NoteIoError(file->Append(bytes), false));
  RETURN_IF_ERROR(NoteIoError(file->Sync(), true));
  RETURN_IF_ERROR(NoteIoError(file->Close(), false));
  CAIRN_KILL_POINT("disk.publish.before_manifest_rename");
  RETURN_IF_ERROR(NoteIoError(fs_->Rename(tmp_path, final_path), false));  // P5.
  RETURN_IF_ERROR(NoteIoError(fs_->SyncDir(manifests_dir_), true));
  return absl::OkStatus();
}

absl::Status DiskStore::CheckRoom(uint64_t bytes_needed) const {
  {
    MutexLock lock(&mu_);
    if (options_.budget_bytes != 0 && used_bytes_ + bytes_needed > options_.budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("disk tier holds ", used_bytes_, " bytes; ",
                                                       bytes_needed, " more would pass its cap of ",
                                                       options_.budget_bytes));
    }
  }
  absl::StatusOr<uint64_t> free_bytes = UsableFreeBytes();
  if (free_bytes.ok() && *free_bytes < bytes_needed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "disk full: ", bytes_needed, " bytes needed, ", *free_bytes,
        " usable (free space less the ", options_.free_space_reserve_bytes, "-byte reserve)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DiskStore::UsableFreeBytes() const {
  ASSIGN_OR_RETURN(uint64_t free_bytes, fs_->FreeBytes(options_.root));
  return free_bytes > options_.free_space_reserve_bytes
             ? free_bytes - options_.free_space_reserve_bytes
             : 0;
}

uint64_t DiskStore::BytesFreedLocked(const Record& r) const {
  uint64_t bytes = r.manifest.state_file.length + r.manifest_bytes;
  for (uint64_t id : r.chunk_ids) {
    auto it = chunks_.find(id);
    if (it != chunks_.end() && it->second.users.size() == 1 && it->second.pins == 0) {
      bytes += it->second.entry.file.length;
    }
  }
  return bytes;
}

void DiskStore::UnpinLocked(const std::vector<uint64_t>& chunk_ids,
                            std::vector<std::string>* orphans) {
  for (uint64_t id : chunk_ids) {
    auto it = chunks_.find(id);
    if (it == chunks_.end()) continue;
    --it->second.pins;
    if (it->second.pins == 0 && it->second.users.empty()) {
      orphans->push_back(ChunkPath(it->second.entry.file.name));
      used_bytes_ -= it->second.entry.file.length;
      chunks_.erase(it);
    }
  }
}

std::vector<std::string> DiskStore::DropLocked(uint64_t id) {
  std::vector<std::string> orphans;
  auto it = live_.find(id);
  if (it == live_.end()) return orphans;
  const Manifest& m = it->second.manifest;
  for (uint64_t chunk_id : it->second.chunk_ids) {
    auto chunk = chunks_.find(chunk_id);
    if (chunk == chunks_.end()) continue;
    chunk->second.RemoveUser(id);
    if (chunk->second.users.empty() && chunk->second.pins == 0) {
      orphans.push_back(ChunkPath(chunk->second.entry.file.name));
      used_bytes_ -= chunk->second.entry.file.length;
      chunks_.erase(chunk);
    }
  }
  orphans.push_back(StatePath(m.state_file.name));
  used_bytes_ -= m.state_file.length + it->second.manifest_bytes;
  live_.erase(it);
  return orphans;
}

absl::Status DiskStore::Publish(const PublishRequest& request,
                                const std::function<void()>& between_pieces) {
  RETURN_IF_ERROR(ValidateRequest(request));
  const uint64_t id = request.checkpoint_id;
  Manifest m;
  m.checkpoint_id = id;
  m.depth = request.tokens.size();
  m.compat_digest = request.compat_digest;
  m.input_digest = request.input_digest;
  m.capture_kind = request.capture_kind;
  m.tokens = request.tokens;
  m.token_hash = TokenHash(m.tokens);
  m.sections = request.sections;
  uint64_t bytes_needed =
      request.state.size() + kFileFooterBytes + 4096 + request.tokens.size() * sizeof(uint32_t);
  {
    MutexLock lock(&mu_);
    if (read_only_) {
      return absl::FailedPreconditionError(
          absl::StrCat("disk tier ", options_.root, " is read-only after an I/O failure"));
    }
    if (live_.count(id) != 0 || in_flight_.count(id) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint ", id, " is already on disk"));
    }
    for (const ChunkWrite& c : request.new_chunks) {
      if (chunks_.count(c.id.chunk_id) != 0 || in_flight_chunks_.count(c.id.chunk_id) != 0) {
        return absl::AlreadyExistsError(
            absl::StrCat("chunk ", c.id.chunk_id, " is already on disk or being written"));
      }
      bytes_needed += c.bytes.size() + kFileFooterBytes + 256;
    }
    for (uint64_t shared : request.shared_chunk_ids) {
      auto it = chunks_.find(shared);
      if (it == chunks_.end() || it->second.lost) {
        return absl::DataLossError(
            absl::StrCat("shared chunk ", shared, " is not on disk (lost, or never written)"));
      }
    }
    for (uint64_t shared : request.shared_chunk_ids) {
      ManifestChunk entry = chunks_[shared].entry;
      ++chunks_[shared].pins;  // P8: pinned until the publish ends.
      m.chunks.push_back(std::move(entry));
    }
    in_flight_.insert(id);
    for (const ChunkWrite& c : request.new_chunks) in_flight_chunks_.insert(c.id.chunk_id);
    m.generation = next_generation_++;
  }
  auto end_in_flight = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    in_flight_.erase(id);
    for (const ChunkWrite& c : request.new_chunks) in_flight_chunks_.erase(c.id.chunk_id);
  };

  std::vector<std::string> written;  // Deleted if the publish fails (IO2).
  auto fail = [&](absl::Status s) {
    std::vector<std::string> orphans;
    {
      MutexLock lock(&mu_);
      end_in_flight();
      UnpinLocked(request.shared_chunk_ids, &orphans);
      ++counters_.publish_failures;
    }
    DeleteBestEffort(written);
    DeleteBestEffort(orphans);
    return Annotate(s, absl::StrCat("publishing checkpoint ", id));
  };

  absl::Status room = CheckRoom(bytes_needed);
  if (!room.ok()) return fail(room);

  const uint64_t compat_hash = CompatHash(request.compat_digest);
  const std::string suffix = absl::StrCat("-", Hex(incarnation_), "-", m.generation);
  for (const ChunkWrite& c : request.new_chunks) {  // P1, P2.
    absl::StatusOr<std::string> header = EncodeChunkHeader(compat_hash, c.id);
    if (!header.ok()) return fail(header.status());
    const std::string name = absl::StrCat("c-", Hex(c.id.chunk_id), suffix, ".chunk");
    written.push_back(ChunkPath(name));
    absl::StatusOr<ManifestFile> file =
        WriteDataFile(chunks_dir_, name, *header, c.bytes, between_pieces);
    if (!file.ok()) return fail(file.status());
    m.chunks.push_back(ManifestChunk{c.id, *std::move(file)});
  }
  {
    absl::StatusOr<std::string> header =
        EncodeStateHeader(compat_hash, StateIdentity{id, m.depth, request.sections});
    if (!header.ok()) return fail(header.status());
    const std::string name = absl::StrCat("s-", Hex(id), suffix, ".state");
    written.push_back(StatePath(name));
    absl::StatusOr<ManifestFile> file =
        WriteDataFile(states_dir_, name, *header, request.state, between_pieces);
    if (!file.ok()) return fail(file.status());
    m.state_file = *std::move(file);
  }
  std::sort(m.chunks.begin(), m.chunks.end(), [](const ManifestChunk& a, const ManifestChunk& b) {
    return std::tie(a.id.component_id, a.id.first_row) <
           std::tie(b.id.component_id, b.id.first_row);
  });
  if (!request.new_chunks.empty()) {  // P3.
    absl::Status s = NoteIoError(fs_->SyncDir(chunks_dir_), true);
    if (!s.ok()) return fail(s);
  }
  if (absl::Status s = NoteIoError(fs_->SyncDir(states_dir_), true); !s.ok()) return fail(s);

  // R5: a chunk it shares may have been found damaged while it ran (the quarantine cannot drop
  // the file this publish pinned, but marks the chunk lost). Nothing may list that file: the
  // publish ends before its manifest is written.
  if (uint64_t lost = LostSharedChunk(request.shared_chunk_ids); lost != 0) {
    return fail(LostWhileWritten(lost, id));
  }
  const std::string tmp_path =
      JoinPath(manifests_dir_, absl::StrCat("m-", Hex(id), suffix, kManifestSuffix, kTmpSuffix));
  const std::string final_path = ManifestPath(id);
  written.push_back(tmp_path);
  if (absl::Status s = WriteManifest(m, tmp_path, final_path); !s.ok()) {
    written.push_back(final_path);  // The rename may have happened.
    return fail(s);
  }
  written.pop_back();
  CAIRN_KILL_POINT("disk.publish.after_manifest_rename");
  const std::string manifest_bytes = EncodeManifest(m);
  if (absl::Status s = NoteIoError(catalog_->Put(CatalogEntry{id, false, manifest_bytes}), false);
      !s.ok()) {  // P6 failed: unpublish (IO2), best effort.
    written.push_back(final_path);
    Unpublish(final_path);
    return fail(s);
  }
  CAIRN_KILL_POINT("disk.publish.after_catalog");
  uint64_t lost = 0;
  {
    MutexLock lock(&mu_);
    lost = LostSharedChunkLocked(request.shared_chunk_ids);
    if (lost == 0) {
      end_in_flight();
      absl::Status registered = RegisterLocked(m, manifest_bytes.size());
      std::vector<std::string> unused;
      UnpinLocked(request.shared_chunk_ids, &unused);
      // New chunk ids were unique on disk and among in-flight publishes when this one began.
      CAIRN_CHECK(registered.ok());
      ++counters_.published;
      return absl::OkStatus();  // P7 is the caller's: acknowledge now.
    }
  }
  // Lost since the check above: the manifest is durable and the catalog lists it. It is
  // quarantined like any checkpoint listing a damaged file (R5): the catalog's flag (synced)
  // first, then the manifest moves to quarantine/, and start-up finishes a quarantine a crash
  // cuts between the two, so no restart lists the file again. A crash before the flag leaves
  // it listed, like a checkpoint whose damage no one has found yet: every restore verifies it
  // (R4). A quarantine that fails leaves the manifest to be deleted, best effort (a catalog
  // entry left without it goes at the next start, R2).
  const absl::Status refused = LostWhileWritten(lost, id);
  if (!QuarantineCheckpoints({id}, std::string(refused.message())).ok()) Unpublish(final_path);
  return fail(refused);
}

uint64_t DiskStore::LostSharedChunk(const std::vector<uint64_t>& shared_chunk_ids) const {
  MutexLock lock(&mu_);
  return LostSharedChunkLocked(shared_chunk_ids);
}

uint64_t DiskStore::LostSharedChunkLocked(const std::vector<uint64_t>& shared_chunk_ids) const {
  for (uint64_t shared : shared_chunk_ids) {
    if (chunks_.at(shared).lost) return shared;  // Pinned: still there.
  }
  return 0;
}

void DiskStore::Unpublish(const std::string& manifest_path) {
  absl::Status unlinked = fs_->Delete(manifest_path);
  if (unlinked.ok()) unlinked = fs_->SyncDir(manifests_dir_);
  if (!unlinked.ok())
    CAIRN_LOG(WARNING) << "cannot unpublish " << manifest_path << ": " << unlinked;
}

// ---------------------------------------------------------------------------------------------
// Accessors.

std::vector<DiskCheckpointInfo> DiskStore::ListCheckpoints() const {
  MutexLock lock(&mu_);
  std::vector<DiskCheckpointInfo> out;
  for (const auto& [id, r] : live_) out.push_back(InfoLocked(id, r));
  return out;
}

std::optional<DiskCheckpointInfo> DiskStore::NextCheckpointAfter(uint64_t after_id) const {
  MutexLock lock(&mu_);
  auto it = live_.upper_bound(after_id);
  if (it == live_.end()) return std::nullopt;
  return InfoLocked(it->first, it->second);
}

DiskCheckpointInfo DiskStore::InfoLocked(uint64_t id, const Record& r) const {
  uint64_t file_bytes = r.manifest.state_file.length;
  for (uint64_t chunk_id : r.chunk_ids) file_bytes += ChunkEntryLocked(chunk_id).file.length;
  return DiskCheckpointInfo{id,
                            r.manifest.generation,
                            r.manifest.depth,
                            r.manifest.compat_digest,
                            BytesFreedLocked(r),
                            file_bytes};
}

std::vector<QuarantineInfo> DiskStore::Quarantined() const { return QuarantinedAfter(0); }

std::vector<QuarantineInfo> DiskStore::QuarantinedAfter(uint64_t after_seq) const {
  MutexLock lock(&mu_);
  // Entries are kept in seq order.
  auto first = std::upper_bound(quarantined_.begin(), quarantined_.end(), after_seq,
                                [](uint64_t seq, const QuarantineInfo& q) { return seq < q.seq; });
  return std::vector<QuarantineInfo>(first, quarantined_.end());
}

uint64_t DiskStore::quarantine_seq() const {
  MutexLock lock(&mu_);
  return quarantine_seq_;
}

bool DiskStore::HasCheckpoint(uint64_t checkpoint_id) const {
  MutexLock lock(&mu_);
  return live_.count(checkpoint_id) != 0;
}

bool DiskStore::HasChunk(uint64_t chunk_id) const {
  MutexLock lock(&mu_);
  auto it = chunks_.find(chunk_id);
  return it != chunks_.end() && !it->second.lost;
}

absl::Status DiskStore::ReserveCheckpointIds(uint64_t up_to) {
  return ReserveIds(/*chunks=*/false, up_to);
}

absl::Status DiskStore::ReserveChunkIds(uint64_t up_to) {
  return ReserveIds(/*chunks=*/true, up_to);
}

absl::Status DiskStore::ReserveIds(bool chunks, uint64_t up_to) {
  {
    MutexLock lock(&mu_);
    IdReservation& r = chunks ? chunk_ids_ : checkpoint_ids_;
    // One write at a time, so that a smaller reservation never lands after a larger one; the
    // wait releases mu_, which no one holds across the write.
    while (r.writing) reserved_.Wait(&mu_);
    if (up_to <= r.up_to) return absl::OkStatus();
    r.writing = true;
  }
  absl::Status s = NoteIoError(
      chunks ? catalog_->PutReservedChunkIds(up_to) : catalog_->PutReservedCheckpointIds(up_to),
      false);
  MutexLock lock(&mu_);
  IdReservation& r = chunks ? chunk_ids_ : checkpoint_ids_;
  r.writing = false;
  reserved_.SignalAll();
  if (!s.ok()) return s;
  r.up_to = up_to;
  uint64_t& max_id = chunks ? max_chunk_id_ : max_checkpoint_id_;
  max_id = std::max(max_id, up_to);
  return absl::OkStatus();
}

uint64_t DiskStore::reserved_checkpoint_ids() const {
  MutexLock lock(&mu_);
  return checkpoint_ids_.up_to;
}

uint64_t DiskStore::reserved_chunk_ids() const {
  MutexLock lock(&mu_);
  return chunk_ids_.up_to;
}

uint64_t DiskStore::max_checkpoint_id() const {
  MutexLock lock(&mu_);
  return max_checkpoint_id_;
}

uint64_t DiskStore::max_chunk_id() const {
  MutexLock lock(&mu_);
  return max_chunk_id_;
}

DiskStoreStats DiskStore::stats() const {
  MutexLock lock(&mu_);
  DiskStoreStats s = counters_;
  s.checkpoints = live_.size();
  s.chunks = chunks_.size();
  s.used_bytes = used_bytes_;
  s.quarantined = quarantined_.size();
  s.read_only = read_only_;
  return s;
}

}  // namespace cairn::cache
