#include "services/cache/cache_daemon.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// Receives core events (under the daemon's lock, since every core call is made with it held),
// keeps the StreamEvents history and notes when regions may need freeing.
class CacheDaemon::Sink final : public EventSink {
 public:
  explicit Sink(CacheDaemon* daemon) : daemon_(daemon) {}

  void Append(const Event& e) override {
    daemon_->mu_.AssertHeld();
    if (e.type == EventType::kEvict || e.type == EventType::kDiskEvict) {
      daemon_->counters_.CountEviction(e.type == EventType::kEvict ? Tier::kRam : Tier::kDisk,
                                       e.reason);
    }
    v1::Event out = ToProtoEvent(e);
    // Followers are woken after the daemon's lock is released.
    for (auto& wake : daemon_->events_.Append(std::move(out))) {
      daemon_->after_unlock_.push_back(std::move(wake));
    }
  }

 private:
  CacheDaemon* const daemon_;
};

// The core's residency callbacks (under the daemon's lock, inside core calls): frees what the
// core no longer accounts for and notes finished spills for AfterCoreLocked. Never calls back
// into the core.
class CacheDaemon::Bytes final : public ResidencyListener {
 public:
  explicit Bytes(CacheDaemon* daemon) : d_(daemon) {}

  void ChunkLeftRam(ChunkId id) override {
    d_->mu_.AssertHeld();
    d_->regions_->DropChunk(id);
  }

  void CheckpointLeftRam(CheckpointId id) override {
    d_->mu_.AssertHeld();
    d_->deferred_persists_.erase(id);
    d_->lost_chunk_retried_.erase(id);
    d_->regions_->DropCheckpoint(id);
  }

  void CheckpointLeftDisk(CheckpointId id) override {
    d_->mu_.AssertHeld();
    if (d_->store_ == nullptr) return;
    // The files go in the background, off the lock; a checkpoint the store no longer has
    // (never written, or quarantined there first) is NotFound, which is fine.
    DiskStore* store = d_->store_.get();
    ThreadPool* pool = d_->disk_pool_.get();
    d_->after_unlock_.push_back([store, pool, id] {
      pool->Schedule([store, id] {
        absl::Status s = store->Delete(id);
        if (!s.ok() && !absl::IsNotFound(s)) {
          CAIRN_LOG(WARNING) << "deleting checkpoint " << id << " from disk: " << s;
        }
      });
    });
  }

  void SpillFinished(uint64_t spill, bool ok, const std::string& failure) override {
    d_->mu_.AssertHeld();
    d_->finished_spills_.push_back(FinishedSpill{spill, ok, failure});
  }

 private:
  CacheDaemon* const d_;
};

absl::StatusOr<std::unique_ptr<CacheDaemon>> CacheDaemon::Create(const CacheDaemonOptions& options,
                                                                 const Clock* clock) {
  if (options.cache.ram_bytes <= 0) {
    return absl::InvalidArgumentError("cache RAM budget must be positive");
  }
  if (options.session_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError("session timeout must exceed the heartbeat interval");
  }
  if (options.default_lease <= absl::ZeroDuration() || options.max_lease < options.default_lease) {
    return absl::InvalidArgumentError("lease durations must be positive, max >= default");
  }
  if (options.max_lease_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the wait for a lease to become ready must be positive");
  }
  if (options.checkpoint_id_block <= 0 || options.checkpoint_id_block > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError("the checkpoint id block must be between 1 and 2^40");
  }
  if (options.chunk_id_block <= 0 || options.chunk_id_block > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError("the chunk id block must be between 1 and 2^40");
  }
  std::unique_ptr<CacheDaemon> d(new CacheDaemon(options, clock));
  ArenaOptions arena_options = options.arena;
  if (arena_options.size_bytes == 0) {
    double slack = std::max(0.0, options.arena_slack_fraction);
    arena_options.size_bytes = static_cast<uint64_t>(
        std::ceil(static_cast<double>(options.cache.ram_bytes) * (1.0 + slack)));
  }
  ASSIGN_OR_RETURN(d->arena_, Arena::Create(arena_options));
  {
    Lock lock(d.get());
    d->regions_ = std::make_unique<ArenaResidency>(d->arena_.get());
  }
  if (!options.fd_server.socket_path.empty()) {
    ASSIGN_OR_RETURN(d->fd_server_,
                     ArenaFdServer::Create(options.fd_server, d->arena_->fd(),
                                           d->arena_->incarnation(), d->arena_->size()));
  }
  CacheOptions cache_options = options.cache;
  if (options.disk_root.empty()) {
    cache_options.disk_bytes = 0;
  } else {
    if (cache_options.disk_bytes < 0) {
      return absl::InvalidArgumentError("the disk budget must not be negative");
    }
    if (options.default_disk_share <= 0 || options.default_disk_share > 1) {
      return absl::InvalidArgumentError("default_disk_share must be in (0, 1]");
    }
    DiskStoreOptions disk = options.disk;
    disk.root = options.disk_root;
    disk.budget_bytes = 0;  // The policy core owns the disk budget and its eviction ranks.
    disk.clock = clock;
    std::vector<RecoveredCheckpoint> found;
    disk.on_recovered = [&found](RecoveredCheckpoint c) { found.push_back(std::move(c)); };
    FileSystem* fs = options.file_system != nullptr ? options.file_system : PosixFileSystem();
    ASSIGN_OR_RETURN(d->store_, DiskStore::Create(disk, fs));
    {
      Lock lock(d.get());
      for (RecoveredCheckpoint& c : found) {
        d->recovered_[c.compat_digest].push_back(std::move(c));
      }
    }
    CAIRN_LOG(INFO) << "disk tier at " << options.disk_root << ": " << found.size()
                    << " checkpoints recovered";
    // What the file system can give the tier: its usable free space plus what it holds.
    absl::StatusOr<uint64_t> usable = d->store_->UsableFreeBytes();
    if (!usable.ok()) return Annotate(usable.status(), "measuring the disk tier's free space");
    const int64_t available = static_cast<int64_t>(
        std::min<uint64_t>(*usable + d->store_->stats().used_bytes,
                           static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
    if (cache_options.disk_bytes == 0) {
      cache_options.disk_bytes =
          static_cast<int64_t>(static_cast<double>(available) * options.default_disk_share);
      CAIRN_LOG(INFO) << "disk budget " << cache_options.disk_bytes
                      << " bytes: " << options.default_disk_share << " of the " << available
                      << " bytes the file system can give the tier";
    } else if (cache_options.disk_bytes > available) {
      CAIRN_LOG(WARNING) << "disk budget " << cache_options.disk_bytes << " bytes is more than "
                         << "the " << available << " bytes the file system can give the tier "
                         << "(free space less the reserve, plus what it holds): using "
                         << available;
      cache_options.disk_bytes = available;
    }
    if (cache_options.disk_bytes <= 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room for a disk tier at ", options.disk_root));
    }
    d->writer_ =
        std::make_unique<BackgroundWriter>(d->store_.get(), d->activity_.get(), options.writer);
    d->disk_pool_ = std::make_unique<ThreadPool>(1);
    d->disk_loads_ = std::make_unique<DeadlinePool>(options.disk_loads, clock);
    CacheDaemon* daemon = d.get();
    d->scrubber_ = std::make_unique<DiskScrubber>(
        d->store_.get(), options.scrub,
        [daemon](uint64_t id, const absl::Status& why) { daemon->OnScrubFoundCorrupt(id, why); });
  }
  d->flushes_ = std::make_unique<FlushWaiters>(d->writer_.get(), clock);
  Lock lock(d.get());
  ASSIGN_OR_RETURN(d->core_, CheckpointCache::Create(cache_options, clock));
  d->core_->events().AddSink(d->sink_.get());
  d->core_->SetListener(d->bytes_.get());
  if (d->store_ != nullptr) {
    d->core_->ReserveIdsAbove(d->store_->max_chunk_id(), d->store_->max_checkpoint_id());
    // None of the new ids is reserved yet: the first capture reserves a block.
    d->core_->LimitCheckpointIds(d->store_->max_checkpoint_id());
    d->core_->LimitChunkIds(d->store_->max_chunk_id());
    d->quarantine_seen_ = d->store_->quarantine_seq();
    // R3: files no manifest lists are removed in the background after start-up.
    DiskStore* store = d->store_.get();
    d->disk_pool_->Schedule([store] {
      absl::StatusOr<SweepStats> swept = store->SweepOrphans();
      if (!swept.ok()) {
        CAIRN_LOG(WARNING) << "orphan sweep: " << swept.status();
      } else if (swept->files_removed > 0) {
        CAIRN_LOG(INFO) << "orphan sweep removed " << swept->files_removed << " files ("
                        << swept->bytes_removed << " bytes)";
      }
    });
  }
  if (d->scrubber_ != nullptr) d->scrubber_->Start();
  if (options.tick_interval > absl::ZeroDuration()) {
    CacheDaemon* daemon = d.get();
    d->ticker_ = std::thread([daemon] {
      while (
          !daemon->stop_ticking_.WaitForNotificationWithTimeout(daemon->options_.tick_interval)) {
        daemon->Tick();
      }
    });
  }
  return d;
}

CacheDaemon::CacheDaemon(const CacheDaemonOptions& options, const Clock* clock)
    : options_(options),
      clock_(clock),
      incarnation_(NewIncarnation()),
      started_(clock->MonotonicNow()),
      sessions_(SessionTable::Options{
          .max_leases_per_session = options.max_leases_per_session,
          .max_reservations_per_session = options.max_reservations_per_session,
          .max_slots = WireLimits::kMaxSlots}),
      events_(options.event_history),
      sink_(std::make_unique<Sink>(this)),
      bytes_(std::make_unique<Bytes>(this)),
      activity_(std::make_unique<SlotActivity>()) {}

CacheDaemon::~CacheDaemon() {
  if (ticker_.joinable()) {
    stop_ticking_.Notify();
    ticker_.join();
  }
  // The fd server's thread stops first so nobody receives a descriptor of a dying arena.
  fd_server_.reset();
  // The scrubber's reports take the lock and use the core: it stops before anything goes.
  if (scrubber_ != nullptr) scrubber_->Shutdown();
  if (flushes_ != nullptr) AbortFlushes();
  // Pending writes complete (Cancelled) through callbacks that take the lock: not held here.
  if (writer_ != nullptr) writer_->Shutdown();
  if (disk_pool_ != nullptr) disk_pool_->Shutdown();
  // Loads still queued are answered Unavailable; a running one finishes (it takes the lock).
  if (disk_loads_ != nullptr) disk_loads_->Shutdown();
}

uint64_t CacheDaemon::UnixMs(absl::Duration monotonic_deadline) const {
  absl::Time wall = clock_->Now() + (monotonic_deadline - Now());
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(wall)));
}

absl::Status CacheDaemon::CheckSlotModelLocked(SlotKey slot, uint64_t model_id) const {
  auto it = slot_models_.find(slot);
  if (it == slot_models_.end() || it->second == model_id) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("slot ", slot.slot, " runs model ", it->second, ", not model ", model_id));
}

absl::StatusOr<const CacheDaemon::Model*> CacheDaemon::FindModelLocked(uint64_t id) const {
  auto it = models_.find(id);
  if (it == models_.end()) return absl::NotFoundError(absl::StrCat("model ", id, " unknown"));
  return &it->second;
}

// ---------------------------------------------------------------------------------------
// Registration and lookup.

absl::StatusOr<RegisteredModel> CacheDaemon::RegisterModel(const ModelRegistration& req) {
  const std::string& digest = req.compatibility;
  if (digest.empty()) return absl::InvalidArgumentError("the compatibility identity is empty");
  RETURN_IF_ERROR(req.layout.Validate());
  RegisteredModel out;
  CoreLock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id));
  const ModelLayout& layout = req.layout;
  auto known = model_ids_.find(digest);
  if (known != model_ids_.end()) {
    const Model& m = models_.at(known->second);
    if (m.layout.chunk_rows != layout.chunk_rows ||
        m.layout.components.size() != layout.components.size() ||
        m.layout.RowBytes() != layout.RowBytes() ||
        m.layout.PrivateBytes() != layout.PrivateBytes()) {
      return absl::FailedPreconditionError(absl::StrCat("compatibility identity ", digest,
                                                        " is registered with a different layout"));
    }
    out.model_id = known->second;
  } else {
    absl::Status s = core_->RegisterLayout(digest, layout);
    if (absl::IsAlreadyExists(s)) return absl::FailedPreconditionError(s.message());
    RETURN_IF_ERROR(s);
    uint64_t id = next_id_++;
    models_.emplace(id, Model{digest, layout});
    model_ids_.emplace(digest, id);
    out.model_id = id;
    AdmitRecoveredLocked(models_.at(id));
  }
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (c.compatibility != digest) continue;
    if (c.in_ram) ++out.ram_checkpoints;
    if (c.on_disk) ++out.disk_checkpoints;
  }
  return out;
}

absl::StatusOr<LookupAnswer> CacheDaemon::Lookup(const PromptLookup& req) {
  if (req.tokens.empty()) return absl::InvalidArgumentError("lookup of an empty prompt");
  const int64_t n = static_cast<int64_t>(req.tokens.size());
  if (req.stable_boundary > n || req.shared_boundary > n) {
    return absl::InvalidArgumentError(absl::StrCat("boundaries ", req.stable_boundary, " and ",
                                                   req.shared_boundary, " must be within the ", n,
                                                   " tokens of the prompt"));
  }
  Lock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id));
  LookupRequest lr;
  lr.identities = Identities{model->compatibility, req.input};
  lr.tokens = req.tokens;
  lr.daemon_session = req.session_id;  // Only this daemon's own slots are live candidates.
  lr.stable_boundary = req.stable_boundary <= 0 ? -1 : req.stable_boundary;
  lr.shared_boundary = req.shared_boundary <= 0 ? -1 : req.shared_boundary;
  lr.max_pass_tokens = std::max<int64_t>(req.max_pass_tokens, 0);
  LookupAnswer out;
  ASSIGN_OR_RETURN(out.result, core_->Lookup(lr));
  counters_.CountLookup();
  for (int32_t slot : sessions_.UsedSlots(req.session_id)) {
    absl::StatusOr<int64_t> bytes = core_->SlotSpillBytes(SlotKey{req.session_id, slot});
    if (!bytes.ok() || *bytes <= 0) continue;  // Not started in the core, or nothing at stake.
    out.slot_spills.push_back(SlotSpill{slot, *bytes});
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Slots, spills and restores.

absl::StatusOr<v1::SpillRequest> CacheDaemon::MakeSpillLocked(const SpillInfo& info) {
  v1::SpillRequest spill;
  spill.set_spill_id(info.id);
  spill.set_slot(static_cast<uint32_t>(info.slot.slot));
  spill.set_urgent(info.urgent);
  for (const ChunkCopy& c : info.chunks) {
    HeldRegion* held = regions_->FindChunk(c.id);
    // Space is reserved when a capture first references a borrowed chunk; a chunk without a
    // region gets one now, sized by the model its slot runs.
    if (held == nullptr || held->bytes == 0) {
      auto model_id = slot_models_.find(info.slot);
      if (model_id == slot_models_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("slot ", info.slot.slot, " runs no known model"));
      }
      ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id->second));
      ASSIGN_OR_RETURN(
          held, regions_->ReserveChunk(c.id, static_cast<uint64_t>(model->layout.ChunkBytes())));
    }
    v1::ChunkSpill* cs = spill.add_chunks();
    cs->set_chunk_id(c.id);
    cs->set_first_row(static_cast<uint64_t>(c.row_begin));
    cs->set_rows(static_cast<uint32_t>(c.row_end - c.row_begin));
    FillHandle(held->handle(), cs->mutable_destination());
  }
  return spill;
}

void CacheDaemon::SendLocked(uint64_t session_id, v1::SessionServerMessage message) {
  sessions_.WithSink(session_id, [&message](SessionSink& sink) { sink.Send(std::move(message)); });
}

void CacheDaemon::SendNewSpillsLocked() {
  for (uint64_t id : core_->TakeNewSpills()) {
    absl::StatusOr<SpillInfo> info = core_->GetSpill(id);
    if (!info.ok()) continue;  // Ended in the call that made it.
    const uint64_t session = info->slot.daemon_session;
    absl::StatusOr<v1::SpillRequest> request =
        !sessions_.Attached(session)
            ? absl::UnavailableError("the session holding the rows has ended")
            : MakeSpillLocked(*info);
    if (request.ok()) {
      v1::SessionServerMessage m;
      *m.mutable_spill_request() = std::move(*request);
      // The stream may have ended since Attached: then the spill fails like above.
      if (sessions_.WithSink(session, [&m](SessionSink& sink) { sink.Send(std::move(m)); })) {
        continue;
      }
      request = absl::UnavailableError("the session holding the rows has ended");
    }
    std::vector<ChunkId> all;
    for (const ChunkCopy& c : info->chunks) all.push_back(c.id);
    CAIRN_LOG(WARNING) << "spill " << id << " cannot be asked for: " << request.status();
    // Outstanding a moment ago: cannot fail.
    core_->FinishSpill(id, {}, all, std::string(request.status().message())).IgnoreError();
  }
}

std::vector<uint64_t> CacheDaemon::OutstandingSpillsLocked(std::vector<uint64_t> spills) {
  if (spills.empty()) return spills;
  AfterCoreLocked();
  std::vector<uint64_t> outstanding;
  for (uint64_t id : spills) {
    if (core_->GetSpill(id).ok()) outstanding.push_back(id);
  }
  return outstanding;
}

void CacheDaemon::AfterCoreLocked() {
  // Settling a lease may ask for more spills, and sending a spill may fail it at once: repeat
  // until both are quiet.
  while (true) {
    SendNewSpillsLocked();
    if (finished_spills_.empty()) break;
    std::vector<FinishedSpill> done = std::move(finished_spills_);
    finished_spills_.clear();
    for (const FinishedSpill& f : done) SettleLeasesLocked(f);
  }
  RetryDeferredPersistsLocked();
}

void CacheDaemon::SettleLeasesLocked(const FinishedSpill& done) {
  if (!done.ok) {
    for (uint64_t id : leases_.AwaitingSpill(done.spill))
      AnswerLeaseLocked(id, false, done.failure);
    return;
  }
  for (uint64_t id : leases_.SpillDone(done.spill)) {
    std::optional<LeaseView> lease = leases_.Find(id);
    if (!lease.has_value()) continue;
    // A declined idle spill leaves chunks borrowed: ask again, urgently.
    std::vector<uint64_t> more = core_->AwaitResident(lease->chunks);
    if (!more.empty()) {
      leases_.Await(id, more);
      continue;
    }
    AnswerLeaseLocked(id, true, "");
  }
}

void CacheDaemon::AnswerLeaseLocked(uint64_t id, bool ok, const std::string& failure) {
  std::optional<LeaseView> lease = leases_.Find(id);
  if (!lease.has_value()) return;
  v1::SessionServerMessage m;
  v1::LeaseReady* ready = m.mutable_lease_ready();
  ready->set_lease_id(id);
  absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(lease->checkpoint);
  std::string why = failure;
  if (ok && (!info.ok() || !info->in_ram)) {
    ok = false;
    why = absl::StrCat("checkpoint ", lease->checkpoint, " left the ram tier while waiting");
  }
  if (ok) {
    const Model* model = ModelForLocked(info->compatibility);
    const int64_t chunk_rows = model != nullptr ? model->layout.chunk_rows : 1;
    std::vector<HeldRegion> handed;
    for (ChunkId c : lease->chunks) {
      absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(c);
      const HeldRegion* held = regions_->FindChunk(c);
      if (!chunk.ok() || chunk->residency != Residency::kResident || held == nullptr) {
        ok = false;
        why = absl::StrCat("chunk ", c, " is not in the arena");
        break;
      }
      v1::ChunkRegion* cr = ready->add_chunks();
      cr->set_chunk_id(c);
      cr->set_first_row(static_cast<uint64_t>(chunk->index * chunk_rows));
      cr->set_rows(static_cast<uint32_t>(chunk_rows));
      FillHandle(held->handle(), cr->mutable_region());
      cr->set_checksum(held->checksum);
      handed.push_back(*held);
    }
    // Regions a chunk got after the grant (at its spill) are held from now on, like the others.
    if (ok) {
      for (const HeldRegion& r : leases_.AddHolds(id, handed)) regions_->Hold(r);
    }
  }
  ready->set_ok(ok);
  if (ok) {
    leases_.MarkReady(id, Now());
  } else {
    ready->clear_chunks();
    ready->set_failure(why);
    CAIRN_LOG(WARNING) << "restore lease " << id << " of checkpoint " << lease->checkpoint
                       << " failed while waiting: " << why;
    core_->AbandonRestore(lease->slot, lease->kept_rows);
    ReleaseLeaseLocked(id);
  }
  SendLocked(lease->session, std::move(m));
}

absl::StatusOr<std::vector<uint64_t>> CacheDaemon::StartSlot(const SlotStart& req) {
  CoreLock lock(this);
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id, req.slot));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id));
  const SlotKey key{req.session_id, slot};
  if (!req.cold) RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id));
  const Identities ids{model->compatibility, req.input};
  sessions_.UseSlot(req.session_id, slot);
  activity_->Busy(key);
  std::vector<uint64_t> preserve_spills;
  if (req.cold) {
    ASSIGN_OR_RETURN(preserve_spills, core_->StartCold(key, ids, req.conversation));
    slot_models_[key] = req.model_id;
  } else {
    RETURN_IF_ERROR(core_->ContinueSlot(key, ids, req.conversation));
    counters_.CountHit(Tier::kLive, 0);
  }
  return OutstandingSpillsLocked(std::move(preserve_spills));
}

const CacheDaemon::Model* CacheDaemon::ModelForLocked(const std::string& compatibility) const {
  auto it = model_ids_.find(compatibility);
  return it == model_ids_.end() ? nullptr : &models_.at(it->second);
}

}  // namespace cairn::cache
