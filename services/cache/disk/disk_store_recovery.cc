// DiskStore's start-up: opening the catalog and reconciling it with the files (R1, R2).
//
// What start-up verifies, per checkpoint: its catalog copy of the manifest decodes (trailing
// checksum, bounds) and names it; its manifest file is listed and has the copy's size; its
// state file and every chunk file it lists are listed and have the sizes the manifest gives;
// no other manifest lists one of its chunks differently. It reads no payload (R1); payload
// checksums are verified by every restore before a slot may run (R4) and by the scrubber (R7).
//
// What makes it cheap with many checkpoints sharing chunks: the catalog is scanned once
// without copying its values, a chunk file is stat'ed once however many manifests list it, and
// the tables keep one entry per chunk (a checkpoint's record holds chunk ids, not entries).

#include <set>
#include <string>
#include <utility>
#include <vector>

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

// One catalog entry as the scan found it, decoded.
struct ScannedEntry {
  uint64_t checkpoint_id = 0;
  bool quarantined = false;
  absl::StatusOr<Manifest> manifest = absl::NotFoundError("quarantined");
  uint64_t manifest_bytes = 0;  // Size of the catalog's copy.
};

}  // namespace

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
  if (!catalog.ok()) return catalog.status();
  catalog_ = std::move(*catalog);
  return absl::OkStatus();
}

absl::Status DiskStore::CheckFileSizes(const Manifest& m, const FileNameSet& chunk_names,
                                       const FileNameSet& state_names) {
  auto check = [&](const std::string& path, const FileNameSet& listed,
                   const ManifestFile& f) -> absl::Status {
    if (!listed.contains(f.name)) return Corrupt(path, "missing");
    ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(path));
    if (size != f.length) {
      return Corrupt(path, absl::StrCat("size ", size, " but the manifest says ", f.length));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(StatePath(m.state_file.name), state_names, m.state_file));
  // A chunk already registered with this very entry had its file checked when that happened;
  // the others are checked now (outside the lock: no lock across file I/O).
  std::vector<const ManifestChunk*> unchecked;
  {
    MutexLock lock(&mu_);
    for (const ManifestChunk& c : m.chunks) {
      auto it = chunks_.find(c.id.chunk_id);
      if (it == chunks_.end() || !(it->second.entry == c)) unchecked.push_back(&c);
    }
  }
  for (const ManifestChunk* c : unchecked) {
    RETURN_IF_ERROR(check(ChunkPath(c->file.name), chunk_names, c->file));
  }
  return absl::OkStatus();
}

absl::Status DiskStore::Reconcile() {
  for (const std::string& dir :
       {options_.root, chunks_dir_, states_dir_, manifests_dir_, quarantine_dir_, catalog_dir_}) {
    RETURN_IF_ERROR(fs_->CreateDir(dir));
  }
  // List first (R3): the sweep considers only these names, all older than our writer.
  ASSIGN_OR_RETURN(std::vector<std::string> chunk_list, fs_->ListDir(chunks_dir_));
  ASSIGN_OR_RETURN(std::vector<std::string> state_list, fs_->ListDir(states_dir_));
  ASSIGN_OR_RETURN(std::vector<std::string> manifest_list, fs_->ListDir(manifests_dir_));
  const FileNameSet chunk_names(chunk_list.begin(), chunk_list.end());
  const FileNameSet state_names(state_list.begin(), state_list.end());
  const FileNameSet manifest_names(manifest_list.begin(), manifest_list.end());
  {
    MutexLock lock(&mu_);
    sweep_candidates_.reserve(chunk_list.size() + state_list.size() + manifest_list.size());
    for (const std::string& n : chunk_list) sweep_candidates_.push_back(ChunkPath(n));
    for (const std::string& n : state_list) sweep_candidates_.push_back(StatePath(n));
    for (const std::string& n : manifest_list) {
      sweep_candidates_.push_back(JoinPath(manifests_dir_, n));
    }
  }

  RETURN_IF_ERROR(OpenCatalog());
  // Decode each entry straight from the scan (no copy of the value). Nothing is admitted
  // until the scan has succeeded, so a catalog found damaged halfway is rebuilt from the
  // manifests exactly as one that fails to open.
  std::vector<ScannedEntry> entries;
  absl::Status scan =
      catalog_->ForEach([&](uint64_t id, bool quarantined, absl::string_view manifest) {
        ScannedEntry& e = entries.emplace_back();
        e.checkpoint_id = id;
        e.quarantined = quarantined;
        e.manifest_bytes = manifest.size();
        if (!quarantined) e.manifest = DecodeManifest(manifest);
        return absl::OkStatus();
      });
  if (!scan.ok() && IsDamagedCatalog(scan)) {
    CAIRN_LOG(WARNING) << "rebuilding the disk catalog from manifests: " << scan;
    RETURN_IF_ERROR(WipeCatalog());
    RETURN_IF_ERROR(OpenCatalog());
    entries.clear();
    scan = absl::OkStatus();
  }
  RETURN_IF_ERROR(scan);

  absl::flat_hash_set<uint64_t> registered;
  registered.reserve(entries.size());
  std::vector<std::pair<uint64_t, std::string>> to_quarantine;
  auto admit = [&](Manifest m, uint64_t manifest_bytes) {
    registered.insert(m.checkpoint_id);  // Seen: a failed admission is not retried below.
    absl::Status s = CheckFileSizes(m, chunk_names, state_names);
    if (s.ok()) {
      MutexLock lock(&mu_);
      s = RegisterLocked(m, manifest_bytes);
    }
    if (!s.ok()) {
      to_quarantine.emplace_back(m.checkpoint_id, std::string(s.message()));
      return;
    }
    if (options_.on_recovered) options_.on_recovered(m);
  };

  for (ScannedEntry& e : entries) {
    const std::string name = ManifestName(e.checkpoint_id);
    if (e.quarantined) {
      if (manifest_names.contains(name)) {
        // A quarantine interrupted between its catalog flag and its rename: finish it.
        to_quarantine.emplace_back(e.checkpoint_id, "quarantine completed at start-up");
      } else {
        MutexLock lock(&mu_);
        quarantined_.push_back({e.checkpoint_id, "quarantined before this start"});
      }
      registered.insert(e.checkpoint_id);
      continue;
    }
    absl::StatusOr<uint64_t> size = manifest_names.contains(name)
                                        ? fs_->FileSize(ManifestPath(e.checkpoint_id))
                                        : absl::StatusOr<uint64_t>(absl::NotFoundError(name));
    if (!e.manifest.ok() || e.manifest->checkpoint_id != e.checkpoint_id || !size.ok() ||
        *size != e.manifest_bytes) {
      // No valid manifest behind the entry (R2); the manifest file, if any, is examined below.
      RETURN_IF_ERROR(catalog_->Remove(e.checkpoint_id));
      continue;
    }
    admit(*std::move(e.manifest), e.manifest_bytes);
    e.manifest = absl::NotFoundError("admitted");  // Frees its tokens and chunk list now.
  }

  for (const std::string& name : manifest_list) {
    uint64_t id = 0;
    if (!ParseManifestName(name, &id) || registered.contains(id)) continue;
    absl::StatusOr<std::string> bytes =
        ReadSmallFile(fs_, JoinPath(manifests_dir_, name), FormatLimits::kMaxManifestBytes);
    if (!bytes.ok()) continue;
    absl::StatusOr<Manifest> m = DecodeManifest(*bytes);
    if (!m.ok() || m->checkpoint_id != id) continue;  // Torn: ignored, then swept (P12, R3).
    // A crash between P5 and P6: re-register (R2).
    RETURN_IF_ERROR(catalog_->Put(CatalogEntry{id, false, *bytes}));
    admit(*std::move(m), bytes->size());
  }

  for (const auto& [id, reason] : to_quarantine) {
    RETURN_IF_ERROR(QuarantineCheckpoints({id}, reason));
  }
  MutexLock lock(&mu_);
  CAIRN_LOG(INFO) << "disk tier " << options_.root << ": " << live_.size() << " checkpoints, "
                  << chunks_.size() << " chunks, " << used_bytes_ << " bytes, "
                  << quarantined_.size() << " quarantined";
  return absl::OkStatus();
}

}  // namespace cairn::cache
