// DiskStore's start-up: opening the catalog and reconciling it with the files (R1, R2).
//
// What start-up verifies, per checkpoint: its catalog copy of the manifest decodes (trailing
// checksum, bounds) and names it; its manifest file is listed and has the copy's size; its
// state file and every chunk file it lists are listed and have the sizes the manifest gives;
// no other manifest lists one of its chunks differently. It reads no payload (R1); payload
// checksums are verified by every restore before a slot may run (R4) and by the scrubber (R7).
//
// What makes it cheap with many checkpoints sharing chunks: the catalog is scanned once
// without copying its values; a chunk entry repeated by many manifests is decoded once (the
// scan's ChunkEntryTable) and its file checked once; every listed file is stat'ed once, on
// other threads while the catalog is scanned; and the tables keep one entry per chunk (a
// checkpoint's record holds chunk ids, not entries). docs/benchmarks.md ("Disk tier") has
// the numbers.

#include <algorithm>
#include <future>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/disk_store_internal.h"

namespace cairn::cache {
namespace {

using disk_internal::Corrupt;
using disk_internal::ManifestName;
using disk_internal::ParseManifestName;
using disk_internal::ReadSmallFile;

// True for catalog open errors that mean damaged or missing files (rebuild from manifests),
// false for anything else, such as the lock held by another process (never wipe then).
bool IsDamagedCatalog(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kNotFound ||
         absl::StrContains(s.message(), "No such file or directory");
}

// One catalog entry as the scan found it, decoded: the manifest without its chunk entries
// (tokens only if someone wants them), which are in the scan's ChunkEntryTable.
struct ScannedEntry {
  uint64_t checkpoint_id = 0;
  bool quarantined = false;
  absl::StatusOr<Manifest> manifest = absl::NotFoundError("quarantined");
  std::vector<uint32_t> chunk_refs;  // Indices in the table, in the manifest's order.
  uint64_t manifest_bytes = 0;       // Size of the catalog's copy.
};

}  // namespace

// A directory's entries as start-up listed them, found by name, with their sizes.
struct DiskStore::ListedFiles {
  std::vector<std::string> names;
  absl::flat_hash_map<absl::string_view, size_t> index;  // Views of `names`.
  std::vector<absl::StatusOr<uint64_t>> sizes;           // Aligned with `names`.

  void Index() {
    index.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  }
  void Stat(FileSystem* fs, const std::string& dir) {
    std::vector<absl::string_view> views(names.begin(), names.end());
    sizes = fs->FileSizesIn(dir, views);
  }
  bool Listed(absl::string_view name) const { return index.contains(name); }
  // The size of `name` in `dir`; DataLoss "missing" if it was not listed.
  absl::StatusOr<uint64_t> Size(const std::string& dir, absl::string_view name) const {
    auto it = index.find(name);
    if (it == index.end()) return Corrupt(JoinPath(dir, name), "missing");
    return sizes[it->second];
  }
};

absl::Status DiskStore::WipeCatalog() {
  catalog_.reset();
  absl::StatusOr<std::vector<std::string>> names = fs_->ListDir(catalog_dir_);
  if (!names.ok()) return absl::OkStatus();  // Nothing to wipe.
  for (const std::string& name : *names) {
    absl::Status s = fs_->Delete(JoinPath(catalog_dir_, name));
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return s;
  }
  return fs_->SyncDir(catalog_dir_);
}

absl::Status DiskStore::OpenCatalog() {
  absl::StatusOr<std::unique_ptr<Catalog>> catalog =
      Catalog::Open(catalog_dir_, options_.catalog_fs, options_.catalog);
  if (!catalog.ok() && IsDamagedCatalog(catalog.status())) {
    // The manifests are the truth (R2): a damaged catalog is rebuilt from them.
    CAIRN_LOG(WARNING) << "rebuilding the disk catalog from manifests: " << catalog.status();
    RETURN_IF_ERROR(WipeCatalog());
    catalog = Catalog::Open(catalog_dir_, options_.catalog_fs, options_.catalog);
  }
  if (!catalog.ok() && absl::StrContains(catalog.status().message(), "/LOCK:")) {
    // RocksDB's own words ("IO error: While lock file: .../LOCK: Resource temporarily
    // unavailable", or "lock hold by current process" within one process) do not say what an
    // operator did.
    return absl::FailedPreconditionError(
        absl::StrCat("disk tier ", options_.root,
                     " is in use by another process (a second cairn-cache with the same "
                     "--cache-disk?): ",
                     catalog.status().message()));
  }
  if (!catalog.ok()) return catalog.status();
  catalog_ = std::move(*catalog);
  return absl::OkStatus();
}

absl::Status DiskStore::CheckFileSizes(const Manifest& m, absl::Span<const uint32_t> chunk_refs,
                                       const ChunkEntryTable& table, const ListedFiles& state_files,
                                       const ListedFiles& chunk_files, RecoveryState* recovery) {
  auto check = [](const std::string& dir, const ListedFiles& listed,
                  const ManifestFile& f) -> absl::Status {
    ASSIGN_OR_RETURN(uint64_t size, listed.Size(dir, f.name));
    if (size != f.length) {
      return Corrupt(JoinPath(dir, f.name),
                     absl::StrCat("size ", size, " but the manifest says ", f.length));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(states_dir_, state_files, m.state_file));
  // A chunk entry whose file was checked for an earlier manifest is not checked again.
  for (uint32_t ref : chunk_refs) {
    if (recovery->file_checked[ref]) continue;
    RETURN_IF_ERROR(check(chunks_dir_, chunk_files, table.entry(ref).file));
    recovery->file_checked[ref] = true;
  }
  return absl::OkStatus();
}

absl::Status DiskStore::RegisterRecoveredLocked(const Manifest& m,
                                                absl::Span<const uint32_t> chunk_refs,
                                                const ChunkEntryTable& table,
                                                uint64_t manifest_bytes, RecoveryState* recovery) {
  for (uint32_t ref : chunk_refs) {
    if (recovery->record[ref] != nullptr) continue;  // Registered as this very entry.
    RETURN_IF_ERROR(CheckSameChunkLocked(m.checkpoint_id, table.entry(ref)));
  }
  Record r = RecordOf(m, manifest_bytes);
  r.chunk_ids.reserve(chunk_refs.size());
  for (uint32_t ref : chunk_refs) {
    ChunkRecord*& chunk = recovery->record[ref];
    if (chunk == nullptr) {
      const ManifestChunk& c = table.entry(ref);
      auto [it, inserted] = chunks_.try_emplace(c.id.chunk_id);
      if (inserted) {
        it->second.entry = c;
        used_bytes_ += c.file.length;
        max_chunk_id_ = std::max(max_chunk_id_, c.id.chunk_id);
      }
      chunk = &it->second;  // Map nodes stay put: nothing leaves chunks_ during recovery.
    }
    chunk->AddUser(m.checkpoint_id);  // Checkpoints come in id order: an append.
    r.chunk_ids.push_back(chunk->entry.id.chunk_id);
  }
  AddRecordLocked(m, std::move(r));
  return absl::OkStatus();
}

absl::Status DiskStore::Reconcile() {
  for (const std::string& dir :
       {options_.root, chunks_dir_, states_dir_, manifests_dir_, quarantine_dir_, catalog_dir_}) {
    RETURN_IF_ERROR(fs_->CreateDir(dir));
  }
  // List first (R3): the sweep considers only these names, all older than our writer.
  ListedFiles chunk_files, state_files, manifest_files;
  ASSIGN_OR_RETURN(chunk_files.names, fs_->ListDir(chunks_dir_));
  ASSIGN_OR_RETURN(state_files.names, fs_->ListDir(states_dir_));
  ASSIGN_OR_RETURN(manifest_files.names, fs_->ListDir(manifests_dir_));
  // The ids of the kept quarantined manifests are never minted again, even when the catalog
  // that flags them has to be rebuilt (the flagged entries count below).
  ASSIGN_OR_RETURN(const std::vector<std::string> quarantined_names, fs_->ListDir(quarantine_dir_));
  for (const std::string& name : quarantined_names) {
    uint64_t id = 0;
    if (!ParseManifestName(name, &id)) continue;
    MutexLock lock(&mu_);
    max_checkpoint_id_ = std::max(max_checkpoint_id_, id);
  }
  // Every listed file is stat'ed in the background while the catalog is opened and scanned:
  // one stat per file, however many manifests list it (nothing writes these directories until
  // start-up is over, so the sizes stay true). The future's destructor waits for the stats
  // on every return path.
  std::future<void> stats = std::async(std::launch::async, [&] {
    for (auto [files, dir] :
         {std::pair{&chunk_files, &chunks_dir_}, std::pair{&state_files, &states_dir_},
          std::pair{&manifest_files, &manifests_dir_}}) {
      files->Stat(fs_, *dir);
    }
  });
  for (ListedFiles* files : {&chunk_files, &state_files, &manifest_files}) files->Index();

  RETURN_IF_ERROR(OpenCatalog());
  // The reserved ids (0 in catalogs from before the records): none of them is minted again.
  absl::StatusOr<uint64_t> reserved = catalog_->ReservedCheckpointIds();
  absl::StatusOr<uint64_t> reserved_chunks = catalog_->ReservedChunkIds();
  // Decode each entry straight from the scan (no copy of the value), each distinct chunk
  // entry once. Nothing is admitted until the scan has succeeded, so a catalog found damaged
  // halfway is rebuilt from the manifests exactly as one that fails to open.
  const bool keep_tokens = static_cast<bool>(options_.on_recovered);
  ChunkEntryTable table;
  std::vector<ScannedEntry> entries;
  absl::Status scan = reserved.status();
  if (scan.ok()) scan = reserved_chunks.status();
  if (scan.ok()) {
    scan = catalog_->ForEach([&](uint64_t id, bool quarantined, absl::string_view manifest) {
      ScannedEntry& e = entries.emplace_back();
      e.checkpoint_id = id;
      e.quarantined = quarantined;
      e.manifest_bytes = manifest.size();
      if (!quarantined) {
        e.manifest = DecodeManifestShared(manifest, keep_tokens, &table, &e.chunk_refs);
      }
      return absl::OkStatus();
    });
  }
  if (!scan.ok() && IsDamagedCatalog(scan)) {
    CAIRN_LOG(WARNING) << "rebuilding the disk catalog from manifests: " << scan;
    RETURN_IF_ERROR(WipeCatalog());
    RETURN_IF_ERROR(OpenCatalog());
    entries.clear();
    scan = absl::OkStatus();
    // A reservation read before the damage was found still holds: the new catalog keeps it.
    auto keep = [this](absl::StatusOr<uint64_t>& up_to,
                       absl::Status (Catalog::*put)(uint64_t)) -> absl::Status {
      if (!up_to.ok() || *up_to == 0) {
        up_to = 0;
        return absl::OkStatus();
      }
      return (catalog_.get()->*put)(*up_to);
    };
    RETURN_IF_ERROR(keep(reserved, &Catalog::PutReservedCheckpointIds));
    RETURN_IF_ERROR(keep(reserved_chunks, &Catalog::PutReservedChunkIds));
  }
  RETURN_IF_ERROR(scan);
  {
    MutexLock lock(&mu_);
    checkpoint_ids_.up_to = *reserved;
    max_checkpoint_id_ = std::max(max_checkpoint_id_, *reserved);
    chunk_ids_.up_to = *reserved_chunks;
    max_chunk_id_ = std::max(max_chunk_id_, *reserved_chunks);
  }
  stats.get();
  absl::flat_hash_set<uint64_t> registered;
  registered.reserve(entries.size());
  std::vector<std::pair<uint64_t, std::string>> to_quarantine;
  RecoveryState recovery;
  auto admit = [&](Manifest m, absl::Span<const uint32_t> chunk_refs, uint64_t manifest_bytes) {
    registered.insert(m.checkpoint_id);  // Seen: a failed admission is not retried below.
    recovery.file_checked.resize(table.size(), false);
    recovery.record.resize(table.size(), nullptr);
    absl::Status s = CheckFileSizes(m, chunk_refs, table, state_files, chunk_files, &recovery);
    if (s.ok()) {
      MutexLock lock(&mu_);
      s = RegisterRecoveredLocked(m, chunk_refs, table, manifest_bytes, &recovery);
    }
    if (!s.ok()) {
      to_quarantine.emplace_back(m.checkpoint_id, std::string(s.message()));
      return;
    }
    if (options_.on_recovered) {
      RecoveredCheckpoint found;
      found.checkpoint_id = m.checkpoint_id;
      found.compat_digest = std::move(m.compat_digest);
      found.input_digest = std::move(m.input_digest);
      found.tokens = std::move(m.tokens);
      found.chunks.reserve(chunk_refs.size());
      for (uint32_t ref : chunk_refs) found.chunks.push_back(table.entry(ref).id);
      for (const StateSection& section : m.sections) found.state_bytes += section.bytes;
      found.capture_kind = m.capture_kind;
      options_.on_recovered(std::move(found));
    }
  };

  for (ScannedEntry& e : entries) {
    const std::string name = ManifestName(e.checkpoint_id);
    if (e.quarantined) {
      if (manifest_files.Listed(name)) {
        // A quarantine interrupted between its catalog flag and its rename: finish it.
        to_quarantine.emplace_back(e.checkpoint_id, "quarantine completed at start-up");
      } else {
        MutexLock lock(&mu_);
        quarantined_.push_back(
            {e.checkpoint_id, "quarantined before this start", ++quarantine_seq_});
        max_checkpoint_id_ = std::max(max_checkpoint_id_, e.checkpoint_id);
      }
      registered.insert(e.checkpoint_id);
      continue;
    }
    const absl::StatusOr<uint64_t> size = manifest_files.Size(manifests_dir_, name);
    if (!e.manifest.ok() || e.manifest->checkpoint_id != e.checkpoint_id || !size.ok() ||
        *size != e.manifest_bytes) {
      // No valid manifest behind the entry (R2); the manifest file, if any, is examined below.
      RETURN_IF_ERROR(catalog_->Remove(e.checkpoint_id));
      continue;
    }
    admit(*std::move(e.manifest), e.chunk_refs, e.manifest_bytes);
    e.manifest = absl::NotFoundError("admitted");  // Frees its tokens now.
    e.chunk_refs = {};
  }

  std::vector<uint32_t> chunk_refs;
  for (const std::string& name : manifest_files.names) {
    uint64_t id = 0;
    if (!ParseManifestName(name, &id) || registered.contains(id)) continue;
    absl::StatusOr<std::string> bytes =
        ReadSmallFile(fs_, JoinPath(manifests_dir_, name), FormatLimits::kMaxManifestBytes);
    if (!bytes.ok()) continue;
    absl::StatusOr<Manifest> m = DecodeManifestShared(*bytes, keep_tokens, &table, &chunk_refs);
    if (!m.ok() || m->checkpoint_id != id) continue;  // Torn: ignored, then swept (P12, R3).
    // A crash between P5 and P6: re-register (R2).
    RETURN_IF_ERROR(catalog_->Put(CatalogEntry{id, false, *bytes}));
    admit(*std::move(m), chunk_refs, bytes->size());
  }

  for (const auto& [id, reason] : to_quarantine) {
    RETURN_IF_ERROR(QuarantineCheckpoints({id}, reason));
  }
  // The manifest of an older quarantine of an id written again since: the catalog flags only
  // current quarantines, so it is no kept entry and nothing would delete it later (R5's bound).
  std::vector<std::string> superseded;
  {
    MutexLock lock(&mu_);
    for (const std::string& name : quarantined_names) {
      uint64_t id = 0;
      if (ParseManifestName(name, &id) && live_.count(id) != 0) {
        superseded.push_back(JoinPath(quarantine_dir_, name));
      }
    }
  }
  DeleteBestEffort(superseded);
  MutexLock lock(&mu_);
  sweep_candidates_.chunks = std::move(chunk_files.names);
  sweep_candidates_.states = std::move(state_files.names);
  sweep_candidates_.manifests = std::move(manifest_files.names);
  CAIRN_LOG(INFO) << "disk tier " << options_.root << ": " << live_.size() << " checkpoints, "
                  << chunks_.size() << " chunks, " << used_bytes_ << " bytes, "
                  << quarantined_.size() << " quarantined";
  return absl::OkStatus();
}

}  // namespace cairn::cache
