// DiskStore's deletion (P9), quarantine (R5) and sweep of orphans (R3): the ways files leave
// the tier. Publication and the tables are in disk_store.cc, reads in disk_store_read.cc.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/disk_store_internal.h"
#include "services/cache/disk/kill_point.h"

namespace cairn::cache {

using disk_internal::kTmpSuffix;
using disk_internal::ManifestName;
using disk_internal::ParseManifestName;

absl::Status DiskStore::Delete(uint64_t checkpoint_id) {
  {
    MutexLock lock(&mu_);
    auto it = live_.find(checkpoint_id);
    if (it == live_.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_id, " not on disk"));
    }
    if (it->second.deleting) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", checkpoint_id, " is being deleted"));
    }
    it->second.deleting = true;  // No new readers from here on.
    if (it->second.readers != 0) {
      // A read under way (a restore, or the scrubber's verification, which the core does not
      // pin) still needs the files: its end deletes the checkpoint (FinishDeferredDelete).
      it->second.delete_when_read = true;
      return absl::OkStatus();
    }
  }
  return DeleteClaimed(checkpoint_id);
}

void DiskStore::FinishDeferredDelete(uint64_t checkpoint_id) {
  const absl::Status s = DeleteClaimed(checkpoint_id);
  if (!s.ok() && !absl::IsNotFound(s)) {
    CAIRN_LOG(WARNING) << "deleting checkpoint " << checkpoint_id << " after its last read: " << s;
  }
}

absl::Status DiskStore::DeleteClaimed(uint64_t checkpoint_id) {
  auto abandon = [&](absl::Status s) {
    // The manifest may still be durable, so its files stay listed; keep serving it.
    MutexLock lock(&mu_);
    if (auto it = live_.find(checkpoint_id); it != live_.end()) it->second.deleting = false;
    return s;
  };
  if (absl::Status s = NoteIoError(catalog_->Remove(checkpoint_id), false); !s.ok()) {
    return abandon(s);
  }
  CAIRN_KILL_POINT("disk.delete.after_catalog");
  absl::Status s = fs_->Delete(ManifestPath(checkpoint_id));
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return abandon(NoteIoError(s, false));
  if (s = NoteIoError(fs_->SyncDir(manifests_dir_), true); !s.ok()) return abandon(s);
  std::vector<std::string> orphans;
  {
    MutexLock lock(&mu_);
    orphans = DropLocked(checkpoint_id);
  }
  // Only now, with no durable manifest listing them, may the files go (P9).
  DeleteBestEffort(orphans);
  return absl::OkStatus();
}

absl::Status DiskStore::QuarantineCheckpoints(const std::set<uint64_t>& ids,
                                              const std::string& reason) {
  {
    // One at a time: an expiry below deletes quarantine/m-<id> by name, which must not be a
    // concurrent quarantine's newer manifest of the same id. The wait releases mu_, which no
    // one holds across the files.
    MutexLock lock(&mu_);
    while (quarantining_) quarantine_done_.Wait(&mu_);
    quarantining_ = true;
  }
  absl::Status first_error;
  for (uint64_t id : ids) {
    CAIRN_LOG(WARNING) << "quarantining disk checkpoint " << id << ": " << reason;
    absl::Status s = NoteIoError(catalog_->Put(CatalogEntry{id, true, ""}), false);
    CAIRN_KILL_POINT("disk.quarantine.after_catalog");
    if (s.ok()) {
      s = fs_->Rename(ManifestPath(id), JoinPath(quarantine_dir_, ManifestName(id)));
      if (s.code() == absl::StatusCode::kNotFound) s = absl::OkStatus();
      if (s.ok()) s = fs_->SyncDir(quarantine_dir_);
      if (s.ok()) s = fs_->SyncDir(manifests_dir_);
      s = NoteIoError(s, false);
    }
    if (!s.ok() && first_error.ok()) first_error = s;
    std::vector<std::string> doomed;
    std::vector<std::pair<uint64_t, bool>> expired;  // Ids, and whether their entry stays.
    {
      MutexLock lock(&mu_);
      doomed = DropLocked(id);  // Not served again, even if the rename failed.
      quarantined_.push_back({id, reason, ++quarantine_seq_});
      max_checkpoint_id_ = std::max(max_checkpoint_id_, id);  // Its id is never minted again.
      while (static_cast<int>(quarantined_.size()) > options_.max_quarantined) {
        const uint64_t old = quarantined_.front().checkpoint_id;
        quarantined_.erase(quarantined_.begin());
        // The id may have been quarantined again since: its catalog entry and quarantine/
        // manifest are the newer quarantine's.
        if (std::any_of(quarantined_.begin(), quarantined_.end(),
                        [old](const QuarantineInfo& q) { return q.checkpoint_id == old; })) {
          continue;
        }
        // Or published again (the daemon writes a checkpoint that lost its disk copy again
        // under its id), or being published: the catalog entry is then the new copy's, but
        // the quarantine/ manifest is still the old one's.
        expired.emplace_back(old, live_.count(old) != 0 || in_flight_.count(old) != 0);
      }
    }
    for (const auto& [old, written_again] : expired) {
      if (written_again || catalog_->Remove(old).ok()) {
        doomed.push_back(JoinPath(quarantine_dir_, ManifestName(old)));
      }
    }
    DeleteBestEffort(doomed);
  }
  MutexLock lock(&mu_);
  quarantining_ = false;
  quarantine_done_.SignalAll();
  return first_error;
}

absl::StatusOr<SweepStats> DiskStore::SweepOrphans() {
  std::vector<std::string> doomed;
  std::set<uint64_t> blocked;  // Manifest ids held against publishes while we delete.
  {
    MutexLock lock(&mu_);
    absl::flat_hash_set<absl::string_view> referenced;  // Chunk and state file names.
    for (const auto& [id, r] : live_) referenced.insert(r.manifest.state_file.name);
    for (const auto& [id, c] : chunks_) referenced.insert(c.entry.file.name);
    for (const std::string& name : sweep_candidates_.chunks) {
      if (!referenced.contains(name)) doomed.push_back(ChunkPath(name));
    }
    for (const std::string& name : sweep_candidates_.states) {
      if (!referenced.contains(name)) doomed.push_back(StatePath(name));
    }
    for (const std::string& name : sweep_candidates_.manifests) {
      uint64_t id = 0;
      if (absl::EndsWith(name, kTmpSuffix)) {
        doomed.push_back(JoinPath(manifests_dir_, name));
      } else if (ParseManifestName(name, &id) && live_.count(id) == 0 &&
                 in_flight_.count(id) == 0) {
        in_flight_.insert(id);
        blocked.insert(id);
        doomed.push_back(JoinPath(manifests_dir_, name));  // Torn or no longer valid.
      }
    }
    sweep_candidates_ = {};
  }
  SweepStats stats;
  std::set<std::string> dirs;
  for (const std::string& path : doomed) {
    absl::StatusOr<uint64_t> size = fs_->FileSize(path);
    absl::Status s = fs_->Delete(path);
    if (s.ok()) {
      ++stats.files_removed;
      stats.bytes_removed += size.ok() ? *size : 0;
      dirs.insert(DirName(path));
    } else if (s.code() != absl::StatusCode::kNotFound) {
      NoteIoError(s, false).IgnoreError();  // Counted; the next start sweeps again.
    }
  }
  for (const std::string& dir : dirs) {
    NoteIoError(fs_->SyncDir(dir), true).IgnoreError();  // Counted and alerted if it fails.
  }
  MutexLock lock(&mu_);
  for (uint64_t id : blocked) in_flight_.erase(id);
  counters_.orphans_removed += stats.files_removed;
  return stats;
}

}  // namespace cairn::cache
