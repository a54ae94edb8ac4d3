// CacheDaemon's bridge to the disk tier: recovery, persists, disk-full eviction.

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// ---------------------------------------------------------------------------------------
// The disk-tier bridge: recovery, persists, disk-full handling.

void CacheDaemon::AdmitRecoveredLocked(const Model& model) {
  auto it = recovered_.find(model.compatibility);
  if (it == recovered_.end()) return;
  std::vector<RecoveredCheckpoint> found = std::move(it->second);
  recovered_.erase(it);
  std::sort(found.begin(), found.end(),
            [](const RecoveredCheckpoint& a, const RecoveredCheckpoint& b) {
              return a.checkpoint_id < b.checkpoint_id;
            });
  const ModelLayout& layout = model.layout;
  const ComputationId provenance = core_->NewComputationId();
  int admitted = 0;
  std::vector<ChunkId> ids;
  std::vector<TokenId> tokens;
  for (RecoveredCheckpoint& m : found) {
    // The files must have this layout's geometry: chunk files of chunk_rows rows of all row
    // components, a state file of the private state and the tail.
    std::string mismatch;
    std::sort(m.chunks.begin(), m.chunks.end(), [](const ChunkIdentity& a, const ChunkIdentity& b) {
      return a.first_row < b.first_row;
    });
    ids.clear();
    for (size_t j = 0; j < m.chunks.size() && mismatch.empty(); ++j) {
      const ChunkIdentity& c = m.chunks[j];
      if (c.first_row != j * static_cast<uint64_t>(layout.chunk_rows) ||
          c.rows != static_cast<uint32_t>(layout.chunk_rows) ||
          c.row_bytes != static_cast<uint64_t>(layout.RowBytes())) {
        mismatch = absl::StrCat("chunk ", c.chunk_id, " does not fit the layout");
      }
      ids.push_back(c.chunk_id);
    }
    const int64_t depth = static_cast<int64_t>(m.tokens.size());
    if (mismatch.empty() &&
        m.state_bytes != static_cast<uint64_t>(layout.PrivateBytes() + layout.TailBytes(depth))) {
      mismatch = "state file does not fit the layout";
    }
    // The kind it was captured as (a version 1 manifest reads as a prompt end).
    const CaptureKind kind = static_cast<CaptureKind>(m.capture_kind);
    if (mismatch.empty() && m.capture_kind > static_cast<uint32_t>(CaptureKind::kGrid)) {
      mismatch = absl::StrCat("unknown capture kind ", m.capture_kind);
    }
    tokens.clear();
    tokens.reserve(m.tokens.size());
    for (uint32_t t : m.tokens) {
      if (t > static_cast<uint32_t>(std::numeric_limits<TokenId>::max())) {
        mismatch = "token id out of range";
        break;
      }
      tokens.push_back(static_cast<TokenId>(t));
    }
    m.tokens = {};  // Not needed again: frees the copy as the index takes its own.
    absl::Status s =
        mismatch.empty()
            ? core_->AdmitRecovered(m.checkpoint_id, Identities{m.compat_digest, m.input_digest},
                                    tokens, ids, kind, provenance)
            : absl::DataLossError(mismatch);
    if (s.ok()) {
      ++admitted;
      continue;
    }
    CAIRN_LOG(WARNING) << "dropping recovered checkpoint " << m.checkpoint_id << ": " << s;
    DiskStore* store = store_.get();
    ThreadPool* pool = disk_pool_.get();
    const CheckpointId id = m.checkpoint_id;
    after_unlock_.push_back([store, pool, id] {
      pool->Schedule([store, id] { store->Delete(id).IgnoreError(); });  // Best effort.
    });
  }
  CAIRN_LOG(INFO) << "model " << model.compatibility << ": " << admitted
                  << " checkpoints restored to the index from disk";
}

void CacheDaemon::MaybePersistLocked(CheckpointId id, bool after_disk_tasks) {
  if (writer_ == nullptr || !core_->ShouldPersist(id)) return;
  absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
  const StateBytes* own = regions_->FindCheckpoint(id);
  const Model* model = info.ok() ? ModelForLocked(info->compatibility) : nullptr;
  if (!info.ok() || own == nullptr || model == nullptr) return;
  // docs/architecture.md §5 step 6: a checkpoint whose chunks are still borrowed is written after
  // they are spilled.
  for (ChunkId c : info->chunks) {
    absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(c);
    if (!chunk.ok() || chunk->residency != Residency::kResident ||
        regions_->FindChunk(c) == nullptr) {
      deferred_persists_.insert(id);
      return;
    }
  }
  deferred_persists_.erase(id);
  absl::StatusOr<PersistTicket> ticket = core_->BeginPersist(id);
  if (!ticket.ok()) {
    CAIRN_LOG(WARNING) << "not writing checkpoint " << id << " to disk: " << ticket.status();
    return;
  }
  absl::StatusOr<std::vector<TokenId>> tokens = core_->CheckpointTokens(id);
  absl::Status pinned = core_->Pin(id);  // Keeps its regions alive while the writer reads them.
  if (!tokens.ok() || !pinned.ok()) {
    core_->AbortPersist(id).IgnoreError();
    if (pinned.ok()) core_->Unpin(id).IgnoreError();
    return;
  }
  const ModelLayout& layout = model->layout;
  WriteJob job;
  PublishRequest& req = job.request;
  req.checkpoint_id = id;
  req.compat_digest = info->compatibility;
  req.input_digest = info->input;
  req.capture_kind = static_cast<uint32_t>(info->kind);
  req.tokens.assign(tokens->begin(), tokens->end());
  absl::flat_hash_set<ChunkId> fresh(ticket->new_chunks.begin(), ticket->new_chunks.end());
  for (size_t j = 0; j < info->chunks.size(); ++j) {
    const ChunkId c = info->chunks[j];
    if (!fresh.contains(c)) {
      req.shared_chunk_ids.push_back(c);
      continue;
    }
    const HeldRegion& held = *regions_->FindChunk(c);
    // One file per chunk holds every row component, one after another (component id 0 with
    // the summed row size names that layout).
    ChunkIdentity identity;
    identity.chunk_id = c;
    identity.first_row = j * static_cast<uint64_t>(layout.chunk_rows);
    identity.rows = static_cast<uint32_t>(layout.chunk_rows);
    identity.row_bytes = static_cast<uint64_t>(layout.RowBytes());
    absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(held.handle());
    if (!span.ok()) {
      core_->AbortPersist(id).IgnoreError();
      core_->Unpin(id).IgnoreError();
      return;
    }
    req.new_chunks.push_back(ChunkWrite{identity, *span});
  }
  const StateBytes& state = *own;
  if (state.private_bytes > 0) {
    req.sections.push_back(StateSection{0, SectionKind::kPrivate, 0, 0, state.private_bytes});
  }
  if (state.tail_bytes > 0) {
    const uint64_t rows = static_cast<uint64_t>(info->depth % layout.chunk_rows);
    req.sections.push_back(StateSection{0, SectionKind::kTail,
                                        static_cast<uint64_t>(info->depth) - rows,
                                        static_cast<uint32_t>(rows), state.tail_bytes});
  }
  if (state.region.bytes > 0) {
    absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(state.region.handle());
    if (!span.ok()) {
      core_->AbortPersist(id).IgnoreError();
      core_->Unpin(id).IgnoreError();
      return;
    }
    req.state = *span;
  }
  // Queued writes of checkpoints on this one's path are covered by it: the core decides.
  job.supersedes = core_->PersistsCoveredBy(id);
  const int64_t bytes_needed =
      ticket->own_bytes + static_cast<int64_t>(ticket->new_chunks.size()) * layout.ChunkBytes();
  job.done = [this, id, bytes_needed](absl::Status status) {
    // The file system's real room, measured off the lock (a statvfs).
    const bool disk_full = absl::IsResourceExhausted(status);
    const int64_t usable =
        disk_full ? static_cast<int64_t>(store_->UsableFreeBytes().value_or(0)) : 0;
    CoreLock lock(this);
    if (status.ok()) {
      absl::Status s = core_->CommitPersist(id);
      if (!s.ok()) CAIRN_LOG(ERROR) << "committing persist of " << id << ": " << s;
    } else {
      if (!absl::IsCancelled(status)) {
        CAIRN_LOG(WARNING) << "writing checkpoint " << id << " to disk: " << status;
      }
      core_->AbortPersist(id).IgnoreError();  // Fails only if the core dropped it already.
    }
    core_->Unpin(id).IgnoreError();
    const bool retried = lost_chunk_retried_.erase(id) > 0;
    if (disk_full) DiskFullLocked(id, bytes_needed - usable);
    if (absl::IsDataLoss(status)) LostSharedChunkLocked(id, retried);
  };
  ++persists_queued_;
  // Enqueue may complete a superseded job (its callback takes this lock): after unlocking. The
  // writer expects the job from now on, so a Flush that starts before the Enqueue (another
  // thread can take the lock in between) waits for this write too.
  BackgroundWriter* writer = writer_.get();
  writer->Expect();
  std::function<void()> enqueue = [writer, job = std::move(job)]() mutable {
    std::function<void(absl::Status)> done = job.done;
    absl::Status s = writer->Enqueue(std::move(job), /*expected=*/true);
    if (!s.ok()) done(s);
  };
  if (after_disk_tasks) {
    // The pool runs its tasks in order, on one thread: a deletion of `id` scheduled before
    // (CheckpointLeftDisk) cannot remove what this job publishes.
    ThreadPool* pool = disk_pool_.get();
    after_unlock_.push_back(
        [pool, enqueue = std::move(enqueue)]() mutable { pool->Schedule(std::move(enqueue)); });
  } else {
    after_unlock_.push_back(std::move(enqueue));
  }
}

void CacheDaemon::DiskFullLocked(CheckpointId id, int64_t shortfall) {
  // IO5: the file system has less room than the ledger thought. The policy evicts by rank
  // (events, files deleted on the disk pool) and the write is tried once more after those
  // deletions (the pool runs its tasks in order).
  const int64_t freed = core_->EvictDiskBytes(std::max<int64_t>(shortfall, 1), "disk full");
  CAIRN_LOG(WARNING) << "disk full writing checkpoint " << id << ": " << shortfall
                     << " bytes short, evicted " << freed << " bytes from the disk tier";
  if (freed <= 0 || !disk_full_retried_.insert(id).second) return;
  ThreadPool* pool = disk_pool_.get();
  after_unlock_.push_back([this, pool, id] {
    pool->Schedule([this, id] {
      CoreLock lock(this);
      MaybePersistLocked(id);
    });
  });
}

void CacheDaemon::LostSharedChunkLocked(CheckpointId id, bool retried) {
  // The store refused the write because a chunk file it shares is no longer on disk: a
  // quarantine lost it before the write started, or while it ran (R5). The checkpoint is still
  // in RAM with every byte. Once the policy has forgotten the lost disk copies (the store's
  // quarantine entries, handled here if the scrubber or the restore that made them has not
  // reported yet), a new write of it writes those chunks as new ones.
  ForgetQuarantinedLocked(0, absl::OkStatus());
  if (retried) {
    // Refused twice in a row: the policy and the store disagree about what is on disk.
    CAIRN_LOG(ERROR) << "not writing checkpoint " << id << " to disk again: a chunk it shares "
                     << "is still missing there";
    return;
  }
  if (!core_->InRam(id)) return;  // Dropped meanwhile: nothing to write.
  lost_chunk_retried_.insert(id);
  MaybePersistLocked(id, /*after_disk_tasks=*/true);
  // The mark goes with a write of it queued or deferred (maybe by the quarantine handling
  // above). With none (the policy no longer wants it on disk, or it did not fit), a write of it
  // later is no retry.
  if (!core_->Persisting(id) && !deferred_persists_.contains(id)) lost_chunk_retried_.erase(id);
}

void CacheDaemon::ForgetQuarantinedLocked(CheckpointId id, const absl::Status& why) {
  // R5: the store quarantined `id` and every other checkpoint listing the bad file, and deleted
  // the files no live checkpoint lists any more. Only its entries since the last report are
  // new; the report's own id comes last, as the store may not have listed it (or dropped its
  // entry past the R5 bound), unless the store holds it again: another thread handled the
  // quarantine first and the checkpoint, still in RAM, was written again meanwhile (that copy
  // is good). The policy forgets, with events, the disk copy of each of them
  // and of every chunk they held that the store no longer has, and nothing else: a checkpoint
  // whose bytes are then nowhere goes, so the next lookup falls back (R6); one also in RAM stays
  // there, as its RAM bytes are its own (verified as they entered the arena), and is written to
  // disk again (R8: it was durable).
  std::vector<QuarantineInfo> fresh = store_->QuarantinedAfter(quarantine_seen_);
  if (!fresh.empty()) quarantine_seen_ = fresh.back().seq;
  if (id != 0 && !store_->HasCheckpoint(id)) {
    fresh.push_back(QuarantineInfo{id, std::string(why.message()), 0});
  }
  std::set<CheckpointId> ram_only;
  auto keep = [&ram_only](const absl::StatusOr<std::vector<CheckpointId>>& kept) {
    if (kept.ok()) ram_only.insert(kept->begin(), kept->end());  // NotFound: gone already.
  };
  for (const QuarantineInfo& q : fresh) {
    absl::StatusOr<CheckpointInfo> gone = core_->GetCheckpoint(q.checkpoint_id);
    if (!gone.ok()) continue;  // Forgotten already.
    for (ChunkId c : gone->chunks) {
      if (!store_->HasChunk(c)) keep(core_->ForgetDiskChunk(c, q.reason));
    }
    // Its own disk copy, whichever of its files was bad (its state file, or a chunk file the
    // store still keeps for another checkpoint).
    keep(core_->ForgetDiskCopy(q.checkpoint_id, q.reason));
  }
  // Commits and deferred retries are the only other writes: nothing else would write these
  // (those kept in RAM, and those not written because a lost copy sat just before them). Their
  // old copies' deletions (a NotFound: the store dropped them) go first. Shallower ones are
  // offered first: one written again covers those just below it, as before. One dropped above
  // is no longer in RAM, and the policy skips it.
  std::vector<std::pair<int64_t, CheckpointId>> by_depth;
  for (CheckpointId kept : ram_only) {
    absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(kept);
    if (info.ok()) by_depth.emplace_back(info->depth, kept);
  }
  std::sort(by_depth.begin(), by_depth.end());
  for (const auto& [depth, kept] : by_depth) MaybePersistLocked(kept, /*after_disk_tasks=*/true);
}

void CacheDaemon::OnScrubFoundCorrupt(CheckpointId id, const absl::Status& why) {
  CoreLock lock(this);
  ForgetQuarantinedLocked(id, why);
}

void CacheDaemon::ScrubPassForTest() {
  if (scrubber_ == nullptr) return;
  while (scrubber_->Step() > 0) {
  }
}

void CacheDaemon::RetryDeferredPersistsLocked() {
  if (deferred_persists_.empty()) return;
  std::vector<CheckpointId> ids(deferred_persists_.begin(), deferred_persists_.end());
  std::sort(ids.begin(), ids.end());
  for (CheckpointId id : ids) {
    absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
    if (!info.ok() || !info->in_ram) {
      deferred_persists_.erase(id);
      continue;
    }
    MaybePersistLocked(id);
  }
}

}  // namespace cairn::cache
