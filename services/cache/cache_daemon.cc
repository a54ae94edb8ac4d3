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
namespace {

constexpr uint32_t kDefaultTreeNodes = 4096;  // GetTree answer size when not asked.

}  // namespace

// Receives core events (under the daemon's lock, since every core call is made with it held),
// keeps the StreamEvents history and notes when regions may need freeing.
class CacheDaemon::Sink final : public EventSink {
 public:
  explicit Sink(CacheDaemon* daemon) : daemon_(daemon) {}

  void Append(const Event& e) override {
    daemon_->mu_.AssertHeld();
    v1::Event out = ToProtoEvent(e);
    daemon_->history_.push_back(std::move(out));
    while (daemon_->history_.size() > daemon_->options_.event_history) {
      daemon_->history_.pop_front();
    }
    for (auto& [token, wake] : daemon_->event_waiters_) {
      daemon_->after_unlock_.push_back(std::move(wake));
    }
    daemon_->event_waiters_.clear();
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
    auto it = d_->chunks_.find(id);
    if (it == d_->chunks_.end()) return;
    d_->FreeHeldLocked(&it->second);
    d_->chunks_.erase(it);
  }

  void CheckpointLeftRam(CheckpointId id) override {
    d_->mu_.AssertHeld();
    d_->deferred_persists_.erase(id);
    auto it = d_->checkpoints_.find(id);
    if (it == d_->checkpoints_.end()) return;
    d_->FreeHeldLocked(&it->second.state.region);
    d_->checkpoints_.erase(it);
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

// Busy while any slot has started work and not reported idle since. Thread-safe.
class CacheDaemon::SlotActivity final : public ModelActivity {
 public:
  void Busy(SlotKey slot) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    busy_.insert(slot);
  }
  void Idle(SlotKey slot) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    busy_.erase(slot);
    if (busy_.empty()) cv_.SignalAll();
  }
  void SessionGone(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    absl::erase_if(busy_, [session](const SlotKey& k) { return k.daemon_session == session; });
    if (busy_.empty()) cv_.SignalAll();
  }
  bool WaitUntilIdle(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (!busy_.empty()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      cv_.WaitWithTimeout(&mu_, left);
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  absl::flat_hash_set<SlotKey> busy_ ABSL_GUARDED_BY(mu_);
};

class ABSL_SCOPED_LOCKABLE CacheDaemon::Lock {
 public:
  explicit Lock(const CacheDaemon* d) ABSL_EXCLUSIVE_LOCK_FUNCTION(d->mu_)
      : d_(const_cast<CacheDaemon*>(d)) {
    d_->mu_.Lock();
  }
  ~Lock() ABSL_UNLOCK_FUNCTION() {
    std::vector<std::function<void()>> wakes = std::move(d_->after_unlock_);
    d_->after_unlock_.clear();
    d_->mu_.Unlock();
    for (auto& w : wakes) w();
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

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
  std::unique_ptr<CacheDaemon> d(new CacheDaemon(options, clock));
  ArenaOptions arena_options = options.arena;
  if (arena_options.size_bytes == 0) {
    double slack = std::max(0.0, options.arena_slack_fraction);
    arena_options.size_bytes = static_cast<uint64_t>(
        std::ceil(static_cast<double>(options.cache.ram_bytes) * (1.0 + slack)));
  }
  ASSIGN_OR_RETURN(d->arena_, Arena::Create(arena_options));
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
    std::vector<Manifest> found;
    disk.on_recovered = [&found](const Manifest& m) { found.push_back(m); };
    FileSystem* fs = options.file_system != nullptr ? options.file_system : PosixFileSystem();
    ASSIGN_OR_RETURN(d->store_, DiskStore::Create(disk, fs));
    {
      Lock lock(d.get());
      for (Manifest& m : found) d->recovered_[m.compat_digest].push_back(std::move(m));
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
  }
  Lock lock(d.get());
  ASSIGN_OR_RETURN(d->core_, CheckpointCache::Create(cache_options, clock));
  d->core_->events().AddSink(d->sink_.get());
  d->core_->SetListener(d->bytes_.get());
  if (d->store_ != nullptr) {
    d->core_->ReserveIdsAbove(d->store_->max_chunk_id(), d->store_->max_checkpoint_id());
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
  return d;
}

CacheDaemon::CacheDaemon(const CacheDaemonOptions& options, const Clock* clock)
    : options_(options),
      clock_(clock),
      incarnation_(NewIncarnation()),
      started_(clock->MonotonicNow()),
      sink_(std::make_unique<Sink>(this)),
      bytes_(std::make_unique<Bytes>(this)),
      activity_(std::make_unique<SlotActivity>()) {}

CacheDaemon::~CacheDaemon() {
  // The fd server's thread stops first so nobody receives a descriptor of a dying arena.
  fd_server_.reset();
  // Pending writes complete (Cancelled) through callbacks that take the lock: not held here.
  if (writer_ != nullptr) writer_->Shutdown();
  if (disk_pool_ != nullptr) disk_pool_->Shutdown();
}

uint64_t CacheDaemon::UnixMs(absl::Duration monotonic_deadline) const {
  absl::Time wall = clock_->Now() + (monotonic_deadline - Now());
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(wall)));
}

absl::StatusOr<CacheDaemon::Session*> CacheDaemon::FindSessionLocked(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session ", id, " is not open"));
  }
  return &it->second;
}

absl::Status CacheDaemon::CheckSlotModelLocked(SlotKey slot, uint64_t model_id) const {
  auto it = slot_models_.find(slot);
  if (it == slot_models_.end() || it->second == model_id) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("slot ", slot.slot, " runs model ", it->second, ", not model ", model_id));
}

template <typename Resp>
absl::Status CacheDaemon::Once(uint64_t session_id, uint64_t request_id, const char* method,
                               Resp* resp, const std::function<absl::Status()>& run) {
  if (request_id == 0) return run();
  {
    Lock lock(this);
    ASSIGN_OR_RETURN(Session * s, FindSessionLocked(session_id));
    auto it = s->replies.find(request_id);
    if (it != s->replies.end()) {
      if (it->second.method != method) {
        return absl::InvalidArgumentError(
            absl::StrCat("client_request_id ", request_id, " was used for ", it->second.method));
      }
      if (!it->second.done) {
        return absl::UnavailableError(
            absl::StrCat("request ", request_id, " is still being handled; retry"));
      }
      if (!resp->ParseFromString(it->second.response)) {
        return absl::InternalError("stored reply does not parse");
      }
      return absl::OkStatus();
    }
    s->replies[request_id] = Reply{method, false, ""};
    s->reply_order.push_back(request_id);
    while (s->reply_order.size() > kRepliesKept) {
      s->replies.erase(s->reply_order.front());
      s->reply_order.pop_front();
    }
  }
  absl::Status status = run();
  Lock lock(this);
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) return status;
  auto it = session->second.replies.find(request_id);
  if (it == session->second.replies.end()) return status;
  if (status.ok()) {
    it->second.done = true;
    it->second.response = resp->SerializeAsString();
  } else {
    // Nothing happened: a retry runs again.
    session->second.replies.erase(it);
  }
  return status;
}

absl::StatusOr<const CacheDaemon::Model*> CacheDaemon::FindModelLocked(uint64_t id) const {
  auto it = models_.find(id);
  if (it == models_.end()) return absl::NotFoundError(absl::StrCat("model ", id, " unknown"));
  return &it->second;
}

// ---------------------------------------------------------------------------------------
// Sessions.

absl::StatusOr<v1::Welcome> CacheDaemon::OpenSession(const v1::Hello& hello, SessionSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("session needs a sink");
  if (hello.slots() > WireLimits::kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.slots ", hello.slots(), " is more than ", WireLimits::kMaxSlots));
  }
  RETURN_IF_ERROR(
      CheckLength("hello.instance_name", hello.instance_name(), WireLimits::kMaxNameBytes));
  Lock lock(this);
  if (draining_) return absl::UnavailableError("the cache daemon is draining");
  Session s;
  s.id = next_id_++;
  s.name = hello.instance_name();
  s.slot_count = hello.slots();
  s.sink = sink;
  s.last_seen = Now();
  v1::Welcome w;
  w.set_session_id(s.id);
  w.set_cache_incarnation(incarnation_);
  v1::ArenaInfo* arena = w.mutable_arena();
  arena->set_incarnation(arena_->incarnation());
  arena->set_size_bytes(arena_->size());
  arena->set_fd_socket_path(options_.fd_server.socket_path);
  arena->set_pin_step_bytes(options_.arena.pin_step_bytes);
  arena->set_first_pin_bytes(options_.arena.first_pin_bytes);
  arena->set_alignment(arena_->alignment());
  w.set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  w.set_session_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.session_timeout)));
  CAIRN_LOG(INFO) << "session " << s.id << " opened by \"" << s.name << "\" pid " << hello.pid();
  sessions_.emplace(s.id, std::move(s));
  return w;
}

absl::Status CacheDaemon::Touch(uint64_t session_id) {
  Lock lock(this);
  ASSIGN_OR_RETURN(Session * s, FindSessionLocked(session_id));
  s->last_seen = Now();
  return absl::OkStatus();
}

absl::Status CacheDaemon::OnSessionMessage(uint64_t session_id,
                                           const v1::SessionClientMessage& message) {
  switch (message.body_case()) {
    case v1::SessionClientMessage::kHeartbeat:
      return Touch(session_id);
    case v1::SessionClientMessage::kSpillDone:
      return OnSpillDone(session_id, message.spill_done());
    case v1::SessionClientMessage::kSlotIdle: {
      Lock lock(this);
      ASSIGN_OR_RETURN(Session * s, FindSessionLocked(session_id));
      s->last_seen = Now();
      ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(message.slot_idle().slot(), s->slot_count));
      activity_->Idle(SlotKey{session_id, slot});
      if (!s->slots.contains(slot)) return absl::OkStatus();  // Nothing borrowed there.
      core_->SpillIdle(SlotKey{session_id, slot}, options_.idle_spill_chunks);
      AfterCoreLocked();
      return absl::OkStatus();
    }
    case v1::SessionClientMessage::kSlotBusy: {
      Lock lock(this);
      ASSIGN_OR_RETURN(Session * s, FindSessionLocked(session_id));
      s->last_seen = Now();
      ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(message.slot_busy().slot(), s->slot_count));
      activity_->Busy(SlotKey{session_id, slot});
      return absl::OkStatus();
    }
    case v1::SessionClientMessage::kHello:
      return absl::FailedPreconditionError("hello sent twice on one session");
    case v1::SessionClientMessage::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty session message");
}

absl::Status CacheDaemon::OnSpillDone(uint64_t session_id, const v1::SpillDone& done) {
  Lock lock(this);
  ASSIGN_OR_RETURN(Session * session, FindSessionLocked(session_id));
  session->last_seen = Now();
  absl::StatusOr<SpillInfo> spill = core_->GetSpill(done.spill_id());
  if (!spill.ok() || spill->slot.daemon_session != session_id) {
    // Also a duplicate of a SpillDone already handled: nothing left to do.
    return absl::NotFoundError(
        absl::StrCat("spill ", done.spill_id(), " is not outstanding for session ", session_id));
  }
  std::vector<ChunkId> all;
  for (const ChunkCopy& c : spill->chunks) all.push_back(c.id);
  auto in_spill = [&all](ChunkId c) { return std::find(all.begin(), all.end(), c) != all.end(); };
  absl::Status malformed = absl::OkStatus();
  if (done.checksums_size() != 0 && done.checksums_size() != done.chunk_ids_size()) {
    malformed = absl::InvalidArgumentError(absl::StrCat("spill ", done.spill_id(), ": ",
                                                        done.checksums_size(), " checksums for ",
                                                        done.chunk_ids_size(), " chunks"));
  }
  for (uint64_t c : done.chunk_ids()) {
    if (malformed.ok() && !in_spill(c)) {
      malformed = absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, " is not in spill ", done.spill_id()));
    }
  }
  if (!malformed.ok()) {
    // A broken report cannot be trusted for any chunk: the spill fails as a whole.
    RETURN_IF_ERROR(core_->FinishSpill(done.spill_id(), {}, all,
                                       absl::StrCat("bad spill report: ", malformed.message())));
    AfterCoreLocked();
    return malformed;
  }
  std::vector<ChunkId> copied;
  std::vector<ChunkId> failed;
  int mismatches = 0;
  for (int i = 0; i < done.chunk_ids_size(); ++i) {
    const ChunkId c = done.chunk_ids(i);
    auto held = chunks_.find(c);
    absl::StatusOr<absl::Span<uint8_t>> bytes = held == chunks_.end()
                                                    ? absl::NotFoundError("no region")
                                                    : arena_->Resolve(held->second.handle());
    if (!bytes.ok()) {
      failed.push_back(c);
      continue;
    }
    const uint64_t sum = Xxh3(bytes->data(), bytes->size());
    if (done.checksums_size() != 0 && done.checksums(i) != sum) {
      CAIRN_LOG(ERROR) << "spilled chunk " << c << " checksum mismatch";
      ++mismatches;
      failed.push_back(c);
      continue;
    }
    held->second.checksum = sum;
    copied.push_back(c);
  }
  for (uint64_t c : done.failed_chunk_ids()) {
    if (in_spill(c)) failed.push_back(c);
  }
  const std::string reason =
      mismatches > 0 ? "data loss: spill checksum mismatch" : "borrowed rows lost before the spill";
  RETURN_IF_ERROR(core_->FinishSpill(done.spill_id(), copied, failed, reason));
  AfterCoreLocked();
  if (mismatches > 0) {
    return absl::DataLossError(absl::StrCat(mismatches, " chunks of spill ", done.spill_id(),
                                            " do not match their checksums"));
  }
  return absl::OkStatus();
}

void CacheDaemon::DetachSession(uint64_t session_id) {
  Lock lock(this);
  auto it = sessions_.find(session_id);
  if (it != sessions_.end()) it->second.sink = nullptr;
}

void CacheDaemon::BeginDrain() {
  Lock lock(this);
  draining_ = true;
}

void CacheDaemon::CloseSession(uint64_t session_id, const std::string& reason) {
  Lock lock(this);
  CloseSessionLocked(session_id, reason);
}

void CacheDaemon::CloseSessionLocked(uint64_t session_id, const std::string& reason) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  CAIRN_LOG(INFO) << "session " << session_id << " (" << it->second.name << ") closed: " << reason;
  std::vector<uint64_t> leases;
  for (const auto& [id, lease] : leases_) {
    if (lease.session == session_id) leases.push_back(id);
  }
  for (uint64_t id : leases) ReleaseLeaseLocked(id);
  std::vector<uint64_t> reservations;
  for (const auto& [id, r] : reservations_) {
    if (r.session == session_id) reservations.push_back(id);
  }
  for (uint64_t id : reservations) ReleaseReservationLocked(id, "session ended: " + reason);
  // Every spill the session owes fails; then (SM13) checkpoints still borrowing rows from the
  // dead daemon's slots are dropped (the core logs them). Everything in the arena stays.
  core_->FailSpillsOf(session_id, "session ended: " + reason);
  for (int32_t slot : it->second.slots) {
    core_->DropSlot(SlotKey{session_id, slot});
    slot_models_.erase(SlotKey{session_id, slot});
  }
  activity_->SessionGone(session_id);
  sessions_.erase(it);
  AfterCoreLocked();
}

void CacheDaemon::Tick() {
  {
    Lock lock(this);
    const absl::Duration now = Now();
    std::vector<uint64_t> expired_leases;
    for (const auto& [id, lease] : leases_) {
      if (lease.ready && lease.expires <= now) expired_leases.push_back(id);
    }
    for (uint64_t id : expired_leases) {
      CAIRN_LOG(WARNING) << "restore lease " << id << " expired";
      ReleaseLeaseLocked(id);
    }
    std::vector<uint64_t> expired_reservations;
    for (const auto& [id, r] : reservations_) {
      if (r.expires <= now) expired_reservations.push_back(id);
    }
    for (uint64_t id : expired_reservations) ReleaseReservationLocked(id, "reservation expired");
    std::vector<uint64_t> silent;
    for (const auto& [id, s] : sessions_) {
      if (now - s.last_seen > options_.session_timeout) silent.push_back(id);
    }
    for (uint64_t id : silent) {
      CloseSessionLocked(id, "no heartbeat within the session timeout");
    }
  }
}

// ---------------------------------------------------------------------------------------
// Registration and lookup.

absl::Status CacheDaemon::RegisterModel(const v1::RegisterModelRequest& req,
                                        v1::RegisterModelResponse* resp) {
  const std::string& digest = req.identity().digest();
  if (digest.empty()) return absl::InvalidArgumentError("identity.digest is empty");
  const v1::CompatibilityIdentity& ident = req.identity();
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"identity.digest", &ident.digest()},
        {"identity.architecture", &ident.architecture()},
        {"identity.weights_digest", &ident.weights_digest()},
        {"identity.tokenizer_digest", &ident.tokenizer_digest()},
        {"identity.template_digest", &ident.template_digest()},
        {"identity.layout_digest", &ident.layout_digest()},
        {"identity.numerics_class", &ident.numerics_class()},
        {"identity.speculative_config", &ident.speculative_config()},
        {"model_name", &req.model_name()}}) {
    RETURN_IF_ERROR(CheckLength(field, *value, WireLimits::kMaxNameBytes));
  }
  ASSIGN_OR_RETURN(ModelLayout layout, LayoutFromProto(req.layout()));
  Lock lock(this);
  RETURN_IF_ERROR(FindSessionLocked(req.session_id()).status());
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
    resp->set_model_id(known->second);
  } else {
    absl::Status s = core_->RegisterLayout(digest, layout);
    if (absl::IsAlreadyExists(s)) return absl::FailedPreconditionError(s.message());
    RETURN_IF_ERROR(s);
    uint64_t id = next_id_++;
    models_.emplace(id, Model{digest, layout});
    model_ids_.emplace(digest, id);
    resp->set_model_id(id);
    AdmitRecoveredLocked(models_.at(id));
  }
  uint64_t ram = 0;
  uint64_t disk = 0;
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (c.compatibility != digest) continue;
    if (c.in_ram) ++ram;
    if (c.on_disk) ++disk;
  }
  resp->set_ram_checkpoints(ram);
  resp->set_disk_checkpoints(disk);
  return absl::OkStatus();
}

absl::Status CacheDaemon::Lookup(const v1::LookupRequest& req, v1::LookupResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<TokenId> tokens, TokensFromProto("tokens", req.tokens()));
  if (tokens.empty()) return absl::InvalidArgumentError("lookup of an empty prompt");
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  if (req.stable_boundary() > tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stable boundary ", req.stable_boundary(),
                                                   " is past the prompt's ", tokens.size(),
                                                   " tokens"));
  }
  Lock lock(this);
  RETURN_IF_ERROR(FindSessionLocked(req.session_id()).status());
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
  LookupRequest lr;
  lr.identities = Identities{model->compatibility, input};
  lr.tokens = tokens;
  lr.daemon_session = req.session_id();  // Only this daemon's own slots are live candidates.
  lr.stable_boundary =
      req.stable_boundary() == 0 ? -1 : static_cast<int64_t>(req.stable_boundary());
  ASSIGN_OR_RETURN(LookupResult r, core_->Lookup(lr));
  ++lookups_;
  auto fill = [](const Candidate& c, v1::Candidate* out) {
    out->set_tier(ToProtoTier(c.tier));
    out->set_depth(static_cast<uint64_t>(c.depth));
    out->set_checkpoint_id(c.checkpoint);
    out->set_slot(static_cast<uint32_t>(c.slot.slot));
    out->set_session_id(c.slot.daemon_session);
  };
  fill(r.best, resp->mutable_best());
  for (const Candidate& c : r.others) fill(c, resp->add_others());
  resp->set_shared_prefix(static_cast<uint64_t>(r.shared_prefix));
  for (const PlannedCapture& p : r.plan.captures) {
    v1::CapturePoint* cp = resp->mutable_plan()->add_captures();
    cp->set_position(static_cast<uint64_t>(p.pos));
    cp->set_kind(ToProtoKind(p.kind));
  }
  for (const PrefillPass& p : r.plan.passes) {
    resp->mutable_plan()->add_pass_ends(static_cast<uint64_t>(p.end));
  }
  if (r.best.depth < r.shared_prefix) {
    resp->set_miss_reason(
        r.best.tier == Tier::kNone
            ? absl::StrCat("no checkpoint before the divergence at token ", r.shared_prefix)
            : absl::StrCat("deepest checkpoint at ", r.best.depth, ", divergence at token ",
                           r.shared_prefix));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Slots, spills and restores.

absl::StatusOr<v1::SpillRequest> CacheDaemon::MakeSpillLocked(const SpillInfo& info) {
  v1::SpillRequest spill;
  spill.set_spill_id(info.id);
  spill.set_slot(static_cast<uint32_t>(info.slot.slot));
  spill.set_urgent(info.urgent);
  for (const ChunkCopy& c : info.chunks) {
    Held& held = chunks_[c.id];
    // Space is reserved when a capture first references a borrowed chunk; a chunk without a
    // region gets one now, sized by the model its slot runs.
    if (held.bytes == 0) {
      auto model_id = slot_models_.find(info.slot);
      if (model_id == slot_models_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("slot ", info.slot.slot, " runs no known model"));
      }
      ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id->second));
      RETURN_IF_ERROR(AllocateLocked(static_cast<uint64_t>(model->layout.ChunkBytes()),
                                     RegionKind::kChunk, &held));
    }
    v1::ChunkSpill* cs = spill.add_chunks();
    cs->set_chunk_id(c.id);
    cs->set_first_row(static_cast<uint64_t>(c.row_begin));
    cs->set_rows(static_cast<uint32_t>(c.row_end - c.row_begin));
    FillHandle(held.handle(), cs->mutable_destination());
  }
  return spill;
}

void CacheDaemon::SendLocked(uint64_t session_id, v1::SessionServerMessage message) {
  auto it = sessions_.find(session_id);
  if (it != sessions_.end() && it->second.sink != nullptr)
    it->second.sink->Send(std::move(message));
}

void CacheDaemon::SendNewSpillsLocked() {
  for (uint64_t id : core_->TakeNewSpills()) {
    absl::StatusOr<SpillInfo> info = core_->GetSpill(id);
    if (!info.ok()) continue;  // Ended in the call that made it.
    auto session = sessions_.find(info->slot.daemon_session);
    absl::StatusOr<v1::SpillRequest> request =
        session == sessions_.end() || session->second.sink == nullptr
            ? absl::UnavailableError("the session holding the rows has ended")
            : MakeSpillLocked(*info);
    if (!request.ok()) {
      std::vector<ChunkId> all;
      for (const ChunkCopy& c : info->chunks) all.push_back(c.id);
      CAIRN_LOG(WARNING) << "spill " << id << " cannot be asked for: " << request.status();
      core_->FinishSpill(id, {}, all, std::string(request.status().message())).IgnoreError();
      continue;  // Outstanding a moment ago: cannot fail.
    }
    v1::SessionServerMessage m;
    *m.mutable_spill_request() = std::move(*request);
    session->second.sink->Send(std::move(m));
  }
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
  std::vector<uint64_t> waiting;
  for (const auto& [id, lease] : leases_) {
    if (!lease.ready && lease.awaiting.contains(done.spill)) waiting.push_back(id);
  }
  std::sort(waiting.begin(), waiting.end());
  for (uint64_t id : waiting) {
    Lease& lease = leases_.at(id);
    if (!done.ok) {
      AnswerLeaseLocked(id, false, done.failure);
      continue;
    }
    lease.awaiting.erase(done.spill);
    if (!lease.awaiting.empty()) continue;
    // A declined idle spill leaves chunks borrowed: ask again, urgently.
    for (uint64_t more : core_->AwaitResident(lease.chunks)) lease.awaiting.insert(more);
    if (lease.awaiting.empty()) AnswerLeaseLocked(id, true, "");
  }
}

void CacheDaemon::AnswerLeaseLocked(uint64_t id, bool ok, const std::string& failure) {
  Lease& lease = leases_.at(id);
  v1::SessionServerMessage m;
  v1::LeaseReady* ready = m.mutable_lease_ready();
  ready->set_lease_id(id);
  absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(lease.checkpoint);
  std::string why = failure;
  if (ok && (!info.ok() || !info->in_ram)) {
    ok = false;
    why = absl::StrCat("checkpoint ", lease.checkpoint, " left the ram tier while waiting");
  }
  if (ok) {
    const Model* model = ModelForLocked(info->compatibility);
    const int64_t chunk_rows = model != nullptr ? model->layout.chunk_rows : 1;
    for (ChunkId c : lease.chunks) {
      absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(c);
      auto held = chunks_.find(c);
      if (!chunk.ok() || chunk->residency != Residency::kResident || held == chunks_.end()) {
        ok = false;
        why = absl::StrCat("chunk ", c, " is not in the arena");
        break;
      }
      v1::ChunkRegion* cr = ready->add_chunks();
      cr->set_chunk_id(c);
      cr->set_first_row(static_cast<uint64_t>(chunk->index * chunk_rows));
      cr->set_rows(static_cast<uint32_t>(chunk_rows));
      FillHandle(held->second.handle(), cr->mutable_region());
      cr->set_checksum(held->second.checksum);
    }
  }
  ready->set_ok(ok);
  if (ok) {
    lease.ready = true;
    lease.expires = Now() + lease.duration;
  } else {
    ready->clear_chunks();
    ready->set_failure(why);
    CAIRN_LOG(WARNING) << "restore lease " << id << " of checkpoint " << lease.checkpoint
                       << " failed while waiting: " << why;
  }
  const uint64_t session = lease.session;
  if (!ok) {
    core_->AbandonRestore(lease.slot, lease.kept_rows);
    ReleaseLeaseLocked(id);
  }
  SendLocked(session, std::move(m));
}

absl::Status CacheDaemon::StartSlot(const v1::StartSlotRequest& req, v1::StartSlotResponse* resp) {
  return Once(req.session_id(), req.client_request_id(), "StartSlot", resp,
              [&] { return StartSlotOnce(req, resp); });
}

absl::Status CacheDaemon::StartSlotOnce(const v1::StartSlotRequest& req,
                                        v1::StartSlotResponse* resp) {
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  if (req.mode() != v1::StartSlotRequest::MODE_COLD &&
      req.mode() != v1::StartSlotRequest::MODE_CONTINUE) {
    return absl::InvalidArgumentError("mode must be MODE_COLD or MODE_CONTINUE");
  }
  Lock lock(this);
  ASSIGN_OR_RETURN(Session * session, FindSessionLocked(req.session_id()));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
  ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(req.slot(), session->slot_count));
  const SlotKey key{req.session_id(), slot};
  if (req.mode() == v1::StartSlotRequest::MODE_CONTINUE) {
    RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id()));
  }
  const Identities ids{model->compatibility, input};
  session->slots.insert(slot);
  activity_->Busy(key);
  switch (req.mode()) {
    case v1::StartSlotRequest::MODE_COLD: {
      ASSIGN_OR_RETURN(std::vector<uint64_t> spills,
                       core_->StartCold(key, ids, req.conversation()));
      slot_models_[key] = req.model_id();
      for (uint64_t spill : spills) resp->add_preserve_spills(spill);
      break;
    }
    case v1::StartSlotRequest::MODE_CONTINUE:
      RETURN_IF_ERROR(core_->ContinueSlot(key, ids, req.conversation()));
      ++hits_[static_cast<int>(Tier::kLive)];
      break;
    default:
      return absl::InvalidArgumentError("start slot needs a mode");
  }
  AfterCoreLocked();
  return absl::OkStatus();
}

const CacheDaemon::Model* CacheDaemon::ModelForLocked(const std::string& compatibility) const {
  auto it = model_ids_.find(compatibility);
  return it == model_ids_.end() ? nullptr : &models_.at(it->second);
}

absl::Status CacheDaemon::AcquireRestore(const v1::AcquireRestoreRequest& req,
                                         v1::RestoreLease* resp) {
  return Once(req.session_id(), req.client_request_id(), "AcquireRestore", resp,
              [&] { return AcquireRestoreOnce(req, resp); });
}

absl::Status CacheDaemon::AcquireRestoreOnce(const v1::AcquireRestoreRequest& req,
                                             v1::RestoreLease* resp) {
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  RETURN_IF_ERROR(InputDigest("input_identity", req.input_identity()).status());
  {
    Lock lock(this);
    ASSIGN_OR_RETURN(Session * session, FindSessionLocked(req.session_id()));
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(req.slot(), session->slot_count));
    int open = 0;
    for (const auto& [id, l] : leases_) {
      if (l.session != req.session_id()) continue;
      ++open;
      if (l.slot.slot == slot) {
        return absl::FailedPreconditionError(
            absl::StrCat("slot ", slot, " already holds restore lease ", id, "; release it first"));
      }
    }
    if (open >= options_.max_leases_per_session) {
      return absl::ResourceExhaustedError(
          absl::StrCat("session holds ", open, " restore leases, the limit"));
    }
    ASSIGN_OR_RETURN(CheckpointInfo info, core_->GetCheckpoint(req.checkpoint_id()));
    if (info.compatibility != model->compatibility) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", req.checkpoint_id(), " belongs to another compatibility identity"));
    }
    session->slots.insert(slot);
    activity_->Busy(SlotKey{req.session_id(), slot});
    if (info.in_ram && checkpoints_.contains(req.checkpoint_id())) {
      return RestoreFromRamLocked(req, *model, resp);
    }
    if (!info.on_disk || store_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", req.checkpoint_id(), " is in no tier that can restore"));
    }
  }
  return RestoreFromDisk(req, resp);
}

absl::Status CacheDaemon::RestoreFromRamLocked(const v1::AcquireRestoreRequest& req,
                                               const Model& model, v1::RestoreLease* resp) {
  // Chunks whose rows still sit in a slot (of any session) are spilled urgently; the lease
  // answers at once with ready = false and is settled by LeaseReady when the spills finish.
  const SlotKey key{req.session_id(), static_cast<int32_t>(req.slot())};
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  const Identities ids{model.compatibility, input};
  ASSIGN_OR_RETURN(RestorePlan plan,
                   core_->Restore(req.checkpoint_id(), key, ids, req.conversation()));
  slot_models_[key] = req.model_id();
  RETURN_IF_ERROR(core_->Pin(req.checkpoint_id()));
  FillLeaseLocked(req, model, plan, checkpoints_.at(req.checkpoint_id()).state, chunks_, Tier::kRam,
                  nullptr, resp);
  return absl::OkStatus();
}

absl::Status CacheDaemon::RestoreFromDisk(const v1::AcquireRestoreRequest& req,
                                          v1::RestoreLease* resp) {
  const CheckpointId id = req.checkpoint_id();
  auto load = std::make_unique<DiskLoad>();
  absl::flat_hash_map<ChunkId, absl::Span<uint8_t>> chunk_dest;
  absl::Span<uint8_t> state_dest;
  {
    // Phase 1, locked: pin the checkpoint and give every missing byte a region.
    Lock lock(this);
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    ASSIGN_OR_RETURN(CheckpointInfo info, core_->GetCheckpoint(id));
    if (!info.on_disk) return absl::NotFoundError(absl::StrCat("checkpoint ", id, " left disk"));
    RETURN_IF_ERROR(core_->Pin(id));
    const ModelLayout& layout = model->layout;
    load->state.private_bytes = static_cast<uint64_t>(layout.PrivateBytes());
    load->state.tail_bytes = static_cast<uint64_t>(layout.TailBytes(info.depth));
    absl::Status alloc = AllocateLocked(load->state.private_bytes + load->state.tail_bytes,
                                        RegionKind::kPrivateState, &load->state.region);
    for (ChunkId c : info.chunks) {
      if (!alloc.ok()) break;
      alloc = AllocateLocked(static_cast<uint64_t>(layout.ChunkBytes()), RegionKind::kChunk,
                             &load->chunks[c]);
    }
    if (!alloc.ok()) {
      DropDiskLoadLocked(id, load.get());
      return absl::ResourceExhaustedError(
          absl::StrCat("arena cannot hold checkpoint ", id, " from disk: ", alloc.message()));
    }
    for (auto& [c, held] : load->chunks) {
      absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(held.handle());
      if (!span.ok()) {
        DropDiskLoadLocked(id, load.get());
        return span.status();
      }
      chunk_dest[c] = *span;
    }
    if (load->state.region.bytes > 0) {
      absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(load->state.region.handle());
      if (!span.ok()) {
        DropDiskLoadLocked(id, load.get());
        return span.status();
      }
      state_dest = *span;
    }
  }
  // Phase 2, unlocked: read and verify every file into the regions (R4).
  absl::Status read =
      store_->Restore(id, [&](const RestorePiece& piece) -> absl::StatusOr<absl::Span<uint8_t>> {
        absl::Span<uint8_t> dest;
        if (piece.kind == FileKind::kState) {
          dest = state_dest;
        } else {
          auto it = chunk_dest.find(piece.chunk.chunk_id);
          if (it == chunk_dest.end()) {
            return absl::DataLossError(absl::StrCat("chunk ", piece.chunk.chunk_id,
                                                    " on disk is not one of the checkpoint's"));
          }
          dest = it->second;
        }
        if (dest.size() != piece.bytes) {
          return absl::DataLossError(
              absl::StrCat("piece of ", piece.bytes, " bytes, expected ", dest.size()));
        }
        return dest;
      });
  // Phase 3, locked: hand the bytes to the slot, or give everything back.
  Lock lock(this);
  absl::StatusOr<const Model*> model = FindModelLocked(req.model_id());
  if (!read.ok() || !model.ok()) {
    DropDiskLoadLocked(id, load.get());
    if (!model.ok()) return model.status();
    if (absl::IsDataLoss(read)) {
      // The store quarantined the checkpoint and every other one sharing the bad file (R5);
      // the policy forgets them too, so the next lookup falls back (R6).
      for (const QuarantineInfo& q : store_->Quarantined()) {
        absl::StatusOr<CheckpointInfo> gone = core_->GetCheckpoint(q.checkpoint_id);
        if (!gone.ok()) continue;
        for (ChunkId c : gone->chunks) {
          if (!store_->HasChunk(c)) core_->QuarantineChunk(c, q.reason).IgnoreError();
        }
      }
      absl::StatusOr<CheckpointInfo> still = core_->GetCheckpoint(id);
      if (still.ok()) {
        for (ChunkId c : still->chunks)
          core_->QuarantineChunk(c, std::string(read.message())).IgnoreError();
      }
    }
    AfterCoreLocked();
    return read;
  }
  if (load->state.region.bytes > 0) {
    load->state.private_checksum = Xxh3(state_dest.data(), load->state.private_bytes);
    load->state.tail_checksum =
        Xxh3(state_dest.data() + load->state.private_bytes, load->state.tail_bytes);
  }
  for (auto& [c, held] : load->chunks) {
    held.checksum = Xxh3(chunk_dest[c].data(), chunk_dest[c].size());
  }
  const SlotKey key{req.session_id(), static_cast<int32_t>(req.slot())};
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  const Identities ids{(*model)->compatibility, input};
  absl::StatusOr<RestorePlan> plan = core_->Restore(id, key, ids, req.conversation());
  if (!plan.ok()) {
    DropDiskLoadLocked(id, load.get());
    return plan.status();
  }
  slot_models_[key] = req.model_id();
  const StateBytes state = load->state;
  const absl::flat_hash_map<ChunkId, Held> regions = load->chunks;
  FillLeaseLocked(req, **model, *plan, state, regions, Tier::kDisk, std::move(load), resp);
  return absl::OkStatus();
}

void CacheDaemon::DropDiskLoadLocked(CheckpointId id, DiskLoad* load) {
  FreeHeldLocked(&load->state.region);
  for (auto& [c, held] : load->chunks) FreeHeldLocked(&held);
  core_->Unpin(id).IgnoreError();  // Only fails for a checkpoint already gone.
}

void CacheDaemon::FillLeaseLocked(const v1::AcquireRestoreRequest& req, const Model& model,
                                  const RestorePlan& plan, const StateBytes& state,
                                  const absl::flat_hash_map<ChunkId, Held>& chunk_regions,
                                  Tier tier, std::unique_ptr<DiskLoad> loaded,
                                  v1::RestoreLease* resp) {
  absl::Duration duration =
      req.lease_ms() == 0 ? options_.default_lease : absl::Milliseconds(req.lease_ms());
  duration = std::min(duration, options_.max_lease);
  const uint64_t lease_id = next_id_++;
  const int64_t chunk_rows = model.layout.chunk_rows;
  Lease lease;
  lease.session = req.session_id();
  lease.checkpoint = req.checkpoint_id();
  lease.slot = SlotKey{req.session_id(), static_cast<int32_t>(req.slot())};
  lease.kept_rows = plan.kept_rows;
  lease.duration = duration;
  lease.expires = Now() + duration;
  lease.loaded = std::move(loaded);
  lease.awaiting.insert(plan.awaiting_spills.begin(), plan.awaiting_spills.end());
  lease.ready = lease.awaiting.empty();
  resp->set_lease_id(lease_id);
  resp->set_expires_unix_ms(UnixMs(Now() + duration));
  resp->set_checkpoint_id(req.checkpoint_id());
  resp->set_depth(static_cast<uint64_t>(plan.depth));
  resp->set_loaded_from(ToProtoTier(tier));
  resp->set_kept_rows(static_cast<uint64_t>(plan.kept_rows));
  resp->set_ready(lease.ready);
  for (uint64_t spill : plan.awaiting_spills) resp->add_awaiting_spills(spill);
  for (uint64_t spill : plan.preserve_spills) resp->add_preserve_spills(spill);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const int64_t first_row = static_cast<int64_t>(i) * chunk_rows;
    if (first_row < plan.kept_rows) continue;
    lease.chunks.push_back(plan.chunks[i]);
    auto held = chunk_regions.find(plan.chunks[i]);
    v1::ChunkRegion* cr = resp->add_chunks();
    cr->set_chunk_id(plan.chunks[i]);
    cr->set_first_row(static_cast<uint64_t>(first_row));
    cr->set_rows(static_cast<uint32_t>(chunk_rows));
    if (held == chunk_regions.end()) continue;  // Cannot happen: regions come with the refs.
    FillHandle(held->second.handle(), cr->mutable_region());
    // Known only once the bytes are there: 0 until then (LeaseReady carries it).
    if (lease.ready || tier == Tier::kDisk) cr->set_checksum(held->second.checksum);
  }
  if (!lease.ready) {
    // The checksum of a chunk already resident is known now; others come with LeaseReady.
    for (v1::ChunkRegion& cr : *resp->mutable_chunks()) {
      absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(cr.chunk_id());
      auto held = chunk_regions.find(cr.chunk_id());
      if (chunk.ok() && chunk->residency == Residency::kResident && held != chunk_regions.end()) {
        cr.set_checksum(held->second.checksum);
      }
    }
  }
  leases_[lease_id] = std::move(lease);
  FillHandle(state.private_handle(), resp->mutable_private_state()->mutable_region());
  resp->mutable_private_state()->set_checksum(state.private_checksum);
  if (state.tail_bytes > 0) {
    v1::StateRegion* tail = resp->mutable_tail();
    tail->set_first_row(static_cast<uint64_t>(plan.depth / chunk_rows * chunk_rows));
    tail->set_rows(static_cast<uint32_t>(plan.depth % chunk_rows));
    FillHandle(state.tail_handle(), tail->mutable_region());
    tail->set_checksum(state.tail_checksum);
  }
  ++hits_[static_cast<int>(tier)];
  tokens_restored_ += static_cast<uint64_t>(plan.depth);
  AfterCoreLocked();
}

void CacheDaemon::ReleaseLeaseLocked(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  // Unpin can only fail for a checkpoint the core already dropped; nothing is left to release.
  core_->Unpin(it->second.checkpoint).IgnoreError();
  if (it->second.loaded != nullptr) {
    FreeHeldLocked(&it->second.loaded->state.region);
    for (auto& [c, held] : it->second.loaded->chunks) FreeHeldLocked(&held);
  }
  leases_.erase(it);
}

absl::Status CacheDaemon::ReleaseLease(const v1::ReleaseLeaseRequest& req,
                                       v1::ReleaseLeaseResponse* /*resp*/) {
  RETURN_IF_ERROR(CheckLength("failure", req.failure(), WireLimits::kMaxTextBytes));
  Lock lock(this);
  RETURN_IF_ERROR(FindSessionLocked(req.session_id()).status());
  auto it = leases_.find(req.lease_id());
  if (it == leases_.end() || it->second.session != req.session_id()) {
    return absl::NotFoundError(absl::StrCat("lease ", req.lease_id(), " is not held"));
  }
  if (!req.restored()) {
    CAIRN_LOG(WARNING) << "restore of checkpoint " << it->second.checkpoint
                       << " failed in the client: " << req.failure();
  }
  // Given up before it was ready: the slot never received the restored rows.
  if (!it->second.ready) core_->AbandonRestore(it->second.slot, it->second.kept_rows);
  ReleaseLeaseLocked(req.lease_id());
  AfterCoreLocked();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Captures.

absl::Status CacheDaemon::ReserveCapture(const v1::ReserveCaptureRequest& req,
                                         v1::CaptureReservation* resp) {
  return Once(req.session_id(), req.client_request_id(), "ReserveCapture", resp,
              [&] { return ReserveCaptureOnce(req, resp); });
}

absl::Status CacheDaemon::ReserveCaptureOnce(const v1::ReserveCaptureRequest& req,
                                             v1::CaptureReservation* resp) {
  ASSIGN_OR_RETURN(CaptureKind kind, FromProtoKind(req.kind()));
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  Lock lock(this);
  ASSIGN_OR_RETURN(Session * session, FindSessionLocked(req.session_id()));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
  ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(req.slot(), session->slot_count));
  const SlotKey key{req.session_id(), slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id()));
  int open = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.session != req.session_id()) continue;
    ++open;
    if (r.slot == key) {
      return absl::FailedPreconditionError(absl::StrCat(
          "slot ", slot, " already holds capture reservation ", id, "; commit or abort it"));
    }
  }
  if (open >= options_.max_reservations_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session holds ", open, " capture reservations, the limit"));
  }
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.depth()) {
    return absl::FailedPreconditionError(absl::StrCat("capture at depth ", req.depth(),
                                                      " but slot ", slot, "'s frontier is at ",
                                                      frontier.size()));
  }
  const uint64_t before = history_.empty() ? 0 : history_.back().seq();
  ASSIGN_OR_RETURN(
      CaptureTicket ticket,
      core_->BeginCapture(
          key, kind, req.conversation(),
          req.stable_boundary() == 0 ? -1 : static_cast<int64_t>(req.stable_boundary())));
  Reservation r;
  r.session = req.session_id();
  r.slot = key;
  r.ticket = ticket.id;
  r.expires = Now() + options_.default_lease;
  r.bytes.chunks = ticket.chunks;
  const ModelLayout& layout = model->layout;
  const int64_t depth = static_cast<int64_t>(req.depth());
  r.bytes.state.private_bytes = static_cast<uint64_t>(layout.PrivateBytes());
  r.bytes.state.tail_bytes = static_cast<uint64_t>(layout.TailBytes(depth));
  absl::Status alloc = AllocateLocked(r.bytes.state.private_bytes + r.bytes.state.tail_bytes,
                                      RegionKind::kPrivateState, &r.bytes.state.region);
  // Space for borrowed chunks is reserved now, so preserving them later never allocates.
  for (const ChunkCopy& c : ticket.borrowed) {
    if (!alloc.ok()) break;
    if (chunks_.contains(c.id)) continue;
    Held held;
    alloc = AllocateLocked(static_cast<uint64_t>(layout.ChunkBytes()), RegionKind::kChunk, &held);
    if (!alloc.ok()) break;
    chunks_[c.id] = held;
    r.new_chunk_regions.push_back(c.id);
  }
  if (!alloc.ok()) {
    const uint64_t id = ticket.id;
    reservations_[id] = std::move(r);
    ReleaseReservationLocked(id, absl::StrCat("arena: ", alloc.message()));
    return absl::ResourceExhaustedError(
        absl::StrCat("arena cannot hold the capture: ", alloc.message()));
  }
  resp->set_reservation_id(ticket.id);
  resp->set_expires_unix_ms(UnixMs(r.expires));
  FillHandle(r.bytes.state.private_handle(), resp->mutable_private_state()->mutable_region());
  if (r.bytes.state.tail_bytes > 0) {
    resp->mutable_tail()->set_first_row(
        static_cast<uint64_t>(depth / layout.chunk_rows * layout.chunk_rows));
    resp->mutable_tail()->set_rows(static_cast<uint32_t>(depth % layout.chunk_rows));
    FillHandle(r.bytes.state.tail_handle(), resp->mutable_tail()->mutable_region());
  }
  for (const v1::Event& e : history_) {
    if (e.seq() > before && e.kind() == v1::EVENT_KIND_EVICT) {
      resp->add_evicted(e.checkpoint_id());
    }
  }
  reservations_[ticket.id] = std::move(r);
  AfterCoreLocked();
  return absl::OkStatus();
}

void CacheDaemon::ReleaseReservationLocked(uint64_t id, const std::string& reason) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Reservation r = std::move(it->second);
  reservations_.erase(it);
  FreeHeldLocked(&r.bytes.state.region);
  // Abort fails only for a ticket the core already dropped (a chunk it needed was lost).
  core_->AbortCapture(r.ticket, reason).IgnoreError();
}

absl::Status CacheDaemon::CommitCapture(const v1::CommitCaptureRequest& req,
                                        v1::CommitCaptureResponse* resp) {
  Lock lock(this);
  RETURN_IF_ERROR(FindSessionLocked(req.session_id()).status());
  auto it = reservations_.find(req.reservation_id());
  if (it == reservations_.end() || it->second.session != req.session_id()) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id(), " is not held"));
  }
  Reservation r = std::move(it->second);
  reservations_.erase(it);
  // Checksums are computed here over the arena bytes rather than trusted from the client: the
  // copy the cache will serve is what gets verified on every later restore (SM9).
  StateBytes& sb = r.bytes.state;
  absl::Status s = absl::OkStatus();
  if (sb.region.bytes > 0) {
    absl::StatusOr<absl::Span<uint8_t>> bytes = arena_->Resolve(sb.region.handle());
    s = bytes.status();
    if (s.ok()) {
      sb.private_checksum = Xxh3(bytes->data(), sb.private_bytes);
      sb.tail_checksum = Xxh3(bytes->data() + sb.private_bytes, sb.tail_bytes);
      sb.region.checksum = Xxh3(bytes->data(), bytes->size());
      if (req.private_checksum() != 0 && req.private_checksum() != sb.private_checksum) {
        s = absl::DataLossError("private state checksum mismatch between client and arena");
      } else if (sb.tail_bytes > 0 && req.tail_checksum() != 0 &&
                 req.tail_checksum() != sb.tail_checksum) {
        s = absl::DataLossError("tail checksum mismatch between client and arena");
      }
    }
  }
  if (!s.ok()) {
    reservations_[req.reservation_id()] = std::move(r);
    ReleaseReservationLocked(req.reservation_id(), std::string(s.message()));
    return s;
  }
  absl::StatusOr<CheckpointId> committed = core_->CommitCapture(r.ticket);
  if (!committed.ok()) {
    // The core rolled the capture back already (a chunk it referenced was lost).
    FreeHeldLocked(&r.bytes.state.region);
    AfterCoreLocked();
    return absl::AbortedError(absl::StrCat("capture ", req.reservation_id(),
                                           " was dropped: ", committed.status().message()));
  }
  const CheckpointId id = *committed;
  resp->set_checkpoint_id(id);
  checkpoints_[id] = std::move(r.bytes);
  const uint64_t queued_before = persists_queued_;
  MaybePersistLocked(id);
  resp->set_queued_for_disk(persists_queued_ != queued_before || deferred_persists_.contains(id));
  AfterCoreLocked();
  return absl::OkStatus();
}

absl::Status CacheDaemon::AbortCapture(const v1::AbortCaptureRequest& req,
                                       v1::AbortCaptureResponse* /*resp*/) {
  RETURN_IF_ERROR(CheckLength("reason", req.reason(), WireLimits::kMaxTextBytes));
  Lock lock(this);
  RETURN_IF_ERROR(FindSessionLocked(req.session_id()).status());
  auto it = reservations_.find(req.reservation_id());
  if (it == reservations_.end() || it->second.session != req.session_id()) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id(), " is not held"));
  }
  ReleaseReservationLocked(req.reservation_id(),
                           req.reason().empty() ? "aborted by client" : req.reason());
  return absl::OkStatus();
}

void CacheDaemon::AdmitRecoveredLocked(const Model& model) {
  auto it = recovered_.find(model.compatibility);
  if (it == recovered_.end()) return;
  std::vector<Manifest> manifests = std::move(it->second);
  recovered_.erase(it);
  std::sort(manifests.begin(), manifests.end(),
            [](const Manifest& a, const Manifest& b) { return a.checkpoint_id < b.checkpoint_id; });
  const ModelLayout& layout = model.layout;
  const ComputationId provenance = core_->NewComputationId();
  int admitted = 0;
  for (const Manifest& m : manifests) {
    // The files must have this layout's geometry: chunk files of chunk_rows rows of all row
    // components, a state file of the private state and the tail.
    std::string mismatch;
    std::vector<ManifestChunk> chunks = m.chunks;
    std::sort(chunks.begin(), chunks.end(), [](const ManifestChunk& a, const ManifestChunk& b) {
      return a.id.first_row < b.id.first_row;
    });
    std::vector<ChunkId> ids;
    for (size_t j = 0; j < chunks.size() && mismatch.empty(); ++j) {
      const ChunkIdentity& c = chunks[j].id;
      if (c.first_row != j * static_cast<uint64_t>(layout.chunk_rows) ||
          c.rows != static_cast<uint32_t>(layout.chunk_rows) ||
          c.row_bytes != static_cast<uint64_t>(layout.RowBytes())) {
        mismatch = absl::StrCat("chunk ", c.chunk_id, " does not fit the layout");
      }
      ids.push_back(c.chunk_id);
    }
    uint64_t state_bytes = 0;
    for (const StateSection& sec : m.sections) state_bytes += sec.bytes;
    const int64_t depth = static_cast<int64_t>(m.tokens.size());
    if (mismatch.empty() &&
        state_bytes != static_cast<uint64_t>(layout.PrivateBytes() + layout.TailBytes(depth))) {
      mismatch = "state file does not fit the layout";
    }
    std::vector<TokenId> tokens;
    for (uint32_t t : m.tokens) {
      if (t > static_cast<uint32_t>(std::numeric_limits<TokenId>::max())) {
        mismatch = "token id out of range";
        break;
      }
      tokens.push_back(static_cast<TokenId>(t));
    }
    absl::Status s =
        mismatch.empty()
            ? core_->AdmitRecovered(m.checkpoint_id, Identities{m.compat_digest, m.input_digest},
                                    tokens, ids, CaptureKind::kEnd, provenance)
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

void CacheDaemon::MaybePersistLocked(CheckpointId id) {
  if (writer_ == nullptr || !core_->ShouldPersist(id)) return;
  absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
  auto bytes_it = checkpoints_.find(id);
  const Model* model = info.ok() ? ModelForLocked(info->compatibility) : nullptr;
  if (!info.ok() || bytes_it == checkpoints_.end() || model == nullptr) return;
  // docs/architecture.md §5 step 6: a checkpoint whose chunks are still borrowed is written after
  // they are spilled.
  for (ChunkId c : info->chunks) {
    absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(c);
    if (!chunk.ok() || chunk->residency != Residency::kResident || !chunks_.contains(c)) {
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
  req.tokens.assign(tokens->begin(), tokens->end());
  absl::flat_hash_set<ChunkId> fresh(ticket->new_chunks.begin(), ticket->new_chunks.end());
  for (size_t j = 0; j < info->chunks.size(); ++j) {
    const ChunkId c = info->chunks[j];
    if (!fresh.contains(c)) {
      req.shared_chunk_ids.push_back(c);
      continue;
    }
    const Held& held = chunks_.at(c);
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
  const StateBytes& state = bytes_it->second.state;
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
    Lock lock(this);
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
    if (disk_full) DiskFullLocked(id, bytes_needed - usable);
    AfterCoreLocked();
  };
  ++persists_queued_;
  // Enqueue may complete a superseded job (its callback takes this lock): after unlocking.
  BackgroundWriter* writer = writer_.get();
  after_unlock_.push_back([writer, job = std::move(job)]() mutable {
    std::function<void(absl::Status)> done = job.done;
    absl::Status s = writer->Enqueue(std::move(job));
    if (!s.ok()) done(s);
  });
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
      Lock lock(this);
      MaybePersistLocked(id);
    });
  });
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

absl::Status CacheDaemon::UpdateFrontier(const v1::UpdateFrontierRequest& req,
                                         v1::UpdateFrontierResponse* resp) {
  return Once(req.session_id(), req.client_request_id(), "UpdateFrontier", resp,
              [&] { return UpdateFrontierOnce(req, resp); });
}

absl::Status CacheDaemon::UpdateFrontierOnce(const v1::UpdateFrontierRequest& req,
                                             v1::UpdateFrontierResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<TokenId> tokens,
                   TokensFromProto("append_tokens", req.append_tokens()));
  Lock lock(this);
  ASSIGN_OR_RETURN(Session * session, FindSessionLocked(req.session_id()));
  RETURN_IF_ERROR(FindModelLocked(req.model_id()).status());
  ASSIGN_OR_RETURN(int32_t slot, SlotFromProto(req.slot(), session->slot_count));
  const SlotKey key{req.session_id(), slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id()));
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.expected_depth()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slot ", slot, "'s frontier is at ", frontier.size(), ", not ", req.expected_depth()));
  }
  if (static_cast<int64_t>(frontier.size() + tokens.size()) > WireLimits::kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("append_tokens would bring slot ", slot,
                                                   " past ", WireLimits::kMaxTokens, " tokens"));
  }
  RETURN_IF_ERROR(core_->ExtendSlot(key, tokens));
  resp->set_depth(frontier.size() + tokens.size());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Region bookkeeping.

absl::Status CacheDaemon::AllocateLocked(uint64_t bytes, RegionKind kind, Held* held) {
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(Region region, arena_->allocator().Allocate(bytes, kind));
  held->region = region.handle;
  held->bytes = bytes;
  return absl::OkStatus();
}

void CacheDaemon::FreeHeldLocked(Held* held) {
  if (held->bytes == 0) return;
  absl::Status s = arena_->allocator().Free(held->region);
  // A failure here is our own bookkeeping bug; the region leaks rather than being reused.
  if (!s.ok()) CAIRN_LOG(ERROR) << "freeing arena region at " << held->region.offset << ": " << s;
  *held = Held{};
}

// ---------------------------------------------------------------------------------------
// Inspection.

absl::Status CacheDaemon::GetStatus(const v1::GetStatusRequest& /*req*/,
                                    v1::GetStatusResponse* resp) {
  // A statvfs: measured before taking the lock.
  const uint64_t disk_free = store_ != nullptr ? store_->UsableFreeBytes().value_or(0) : 0;
  Lock lock(this);
  resp->set_cache_incarnation(incarnation_);
  resp->set_uptime_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(Now() - started_)));
  Accounting a = core_->RamAccounting();
  v1::Budget* ram = resp->mutable_ram();
  ram->set_capacity_bytes(static_cast<uint64_t>(a.budget));
  ram->set_used_bytes(static_cast<uint64_t>(a.used));
  ram->set_reserved_bytes(static_cast<uint64_t>(core_->ram_ledger().reserved()));
  ram->set_row_bytes(static_cast<uint64_t>(a.chunk_bytes));
  ram->set_private_bytes(static_cast<uint64_t>(a.private_bytes + a.tail_bytes));
  ram->set_full_copy_bytes(static_cast<uint64_t>(a.full_copy_bytes));
  ram->set_checkpoints(static_cast<uint64_t>(a.checkpoints));
  ram->set_max_checkpoints(static_cast<uint64_t>(options_.cache.retention.max_checkpoints));
  resp->set_disk_enabled(store_ != nullptr);
  if (store_ != nullptr) {
    const DiskStoreStats ds = store_->stats();
    resp->set_disk_healthy(!ds.read_only);
    resp->set_quarantined(ds.quarantined);
    v1::Budget* disk = resp->mutable_disk();
    disk->set_capacity_bytes(static_cast<uint64_t>(core_->disk_ledger().budget()));
    disk->set_used_bytes(static_cast<uint64_t>(core_->disk_ledger().used()));
    disk->set_reserved_bytes(static_cast<uint64_t>(core_->disk_ledger().reserved()));
    uint64_t on_disk = 0;
    for (const CheckpointInfo& c : core_->Checkpoints()) on_disk += c.on_disk ? 1 : 0;
    disk->set_checkpoints(on_disk);
    resp->set_disk_free_bytes(disk_free);
  }
  resp->set_sessions(static_cast<uint32_t>(sessions_.size()));
  resp->set_lookups(lookups_);
  resp->set_hits_live(hits_[static_cast<int>(Tier::kLive)]);
  resp->set_hits_ram(hits_[static_cast<int>(Tier::kRam)]);
  resp->set_hits_disk(hits_[static_cast<int>(Tier::kDisk)]);
  resp->set_tokens_restored(tokens_restored_);
  return absl::OkStatus();
}

absl::Status CacheDaemon::ListCheckpoints(const v1::ListCheckpointsRequest& req,
                                          v1::ListCheckpointsResponse* resp) {
  Lock lock(this);
  std::string compatibility;
  if (req.model_id() != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    compatibility = model->compatibility;
  }
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (!compatibility.empty() && c.compatibility != compatibility) continue;
    const Tier tier = c.in_ram ? Tier::kRam : Tier::kDisk;
    if (req.tier() != v1::TIER_UNSPECIFIED && req.tier() != ToProtoTier(tier)) continue;
    v1::CheckpointInfo* out = resp->add_checkpoints();
    out->set_checkpoint_id(c.id);
    out->set_depth(static_cast<uint64_t>(c.depth));
    out->set_tier(ToProtoTier(tier));
    out->set_kind(ToProtoKind(c.kind));
    out->set_on_disk(c.on_disk);
    bool borrowed = false;
    for (ChunkId chunk : c.chunks) {
      absl::StatusOr<ChunkInfo> ci = core_->GetChunk(chunk);
      if (ci.ok() && ci->borrowed) borrowed = true;
    }
    out->set_borrowed(borrowed);
    out->set_private_bytes(static_cast<uint64_t>(c.private_bytes + c.tail_bytes));
    const Model* model = nullptr;
    auto mid = model_ids_.find(c.compatibility);
    if (mid != model_ids_.end()) model = &models_.at(mid->second);
    if (model != nullptr) {
      out->set_row_bytes(static_cast<uint64_t>(c.chunks.size()) *
                         static_cast<uint64_t>(model->layout.ChunkBytes()));
    }
    out->set_conversation(c.conversation);
    out->set_compat_digest(c.compatibility);
  }
  return absl::OkStatus();
}

absl::Status CacheDaemon::GetTree(const v1::GetTreeRequest& req, v1::GetTreeResponse* resp) {
  // The tree is rebuilt from the checkpoints' token sequences: a compressed trie in which a
  // node sits at every checkpoint depth and every branch point.
  Lock lock(this);
  std::string compatibility;
  if (req.model_id() != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    compatibility = model->compatibility;
  } else if (!models_.empty()) {
    uint64_t first = std::numeric_limits<uint64_t>::max();
    for (const auto& [id, m] : models_) first = std::min(first, id);
    compatibility = models_.at(first).compatibility;
  }
  struct Entry {
    std::vector<TokenId> tokens;
    CheckpointInfo info;
  };
  std::vector<Entry> entries;
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (c.compatibility != compatibility) continue;
    absl::StatusOr<std::vector<TokenId>> tokens = core_->CheckpointTokens(c.id);
    if (tokens.ok()) entries.push_back(Entry{std::move(*tokens), c});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.tokens < b.tokens; });
  const uint32_t max_nodes = req.max_nodes() == 0
                                 ? kDefaultTreeNodes
                                 : std::min(req.max_nodes(), WireLimits::kMaxTreeNodes);
  // Sorted sequences put every prefix right before its extensions, so one pass with a stack of
  // open ancestors builds the compressed trie: pop what the next sequence leaves, split an
  // edge at a branch point, add a node at the sequence's end.
  struct Open {
    uint64_t depth;
    int index;  // Into resp->nodes(); -1 for the root.
  };
  std::vector<Open> stack = {{0, -1}};
  std::vector<TokenId> previous;
  auto node_id = [](int index) -> uint64_t { return index < 0 ? 0 : uint64_t(index) + 1; };
  auto add_node = [&](uint64_t depth) -> int {
    if (static_cast<uint32_t>(resp->nodes_size()) >= max_nodes) return -2;
    v1::TreeNode* n = resp->add_nodes();
    const int index = resp->nodes_size() - 1;
    n->set_node_id(node_id(index));
    n->set_parent_id(node_id(stack.back().index));
    n->set_depth(depth);
    n->set_edge_tokens(depth - stack.back().depth);
    stack.push_back({depth, index});
    return index;
  };
  for (const Entry& e : entries) {
    uint64_t common = 0;
    while (common < previous.size() && common < e.tokens.size() &&
           previous[common] == e.tokens[common]) {
      ++common;
    }
    int popped = -1;
    while (stack.size() > 1 && stack.back().depth > common) {
      popped = stack.back().index;
      stack.pop_back();
    }
    if (popped >= 0 && stack.back().depth < common) {
      // The new sequence leaves the popped node's edge part-way: split it there.
      const int branch = add_node(common);
      if (branch == -2) break;
      v1::TreeNode* child = resp->mutable_nodes(popped);
      child->set_parent_id(node_id(branch));
      child->set_edge_tokens(child->depth() - common);
    }
    int at = stack.back().index;
    if (at < 0 || stack.back().depth != e.tokens.size()) at = add_node(e.tokens.size());
    if (at == -2) {
      resp->set_truncated(true);
      break;
    }
    v1::Candidate* c = resp->mutable_nodes(at)->add_candidates();
    c->set_tier(ToProtoTier(e.info.in_ram ? Tier::kRam : Tier::kDisk));
    c->set_depth(static_cast<uint64_t>(e.info.depth));
    c->set_checkpoint_id(e.info.id);
    previous = e.tokens;
  }
  if (static_cast<uint32_t>(resp->nodes_size()) >= max_nodes) resp->set_truncated(true);
  return absl::OkStatus();
}

absl::Status CacheDaemon::Explain(const v1::ExplainRequest& req, v1::ExplainResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<TokenId> tokens, TokensFromProto("tokens", req.tokens()));
  if (tokens.empty()) return absl::InvalidArgumentError("explain of an empty prompt");
  Lock lock(this);
  uint64_t model_id = req.model_id();
  if (model_id == 0) {  // The first registered model, as GetTree.
    for (const auto& [id, m] : models_) model_id = model_id == 0 ? id : std::min(model_id, id);
  }
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id));
  LookupRequest lr;
  lr.identities = Identities{model->compatibility, ""};
  lr.tokens = tokens;
  ASSIGN_OR_RETURN(LookupResult r, core_->Lookup(lr));
  v1::LookupResponse* out = resp->mutable_lookup();
  for (const PlannedCapture& p : r.plan.captures) {
    v1::CapturePoint* cp = out->mutable_plan()->add_captures();
    cp->set_position(static_cast<uint64_t>(p.pos));
    cp->set_kind(ToProtoKind(p.kind));
  }
  out->mutable_best()->set_tier(ToProtoTier(r.best.tier));
  out->mutable_best()->set_depth(static_cast<uint64_t>(r.best.depth));
  out->mutable_best()->set_checkpoint_id(r.best.checkpoint);
  out->set_shared_prefix(static_cast<uint64_t>(r.shared_prefix));
  absl::flat_hash_set<CheckpointId> on_path;
  on_path.insert(r.best.checkpoint);
  for (const Candidate& c : r.others) on_path.insert(c.checkpoint);
  for (const v1::Event& e : history_) {
    if (e.checkpoint_id() != 0 && on_path.contains(e.checkpoint_id())) *resp->add_related() = e;
  }
  if (r.best.tier == Tier::kNone) {
    resp->set_summary(
        absl::StrCat("cold: no compatible checkpoint on the path; longest shared "
                     "prefix ",
                     r.shared_prefix, " tokens"));
  } else {
    resp->set_summary(absl::StrCat(
        "restores ", r.best.depth, " of ", tokens.size(), " tokens from ", TierName(r.best.tier),
        r.best.depth < r.shared_prefix
            ? absl::StrCat("; history matches up to token ", r.shared_prefix)
            : ""));
  }
  return absl::OkStatus();
}

absl::Status CacheDaemon::Evict(const v1::EvictRequest& req, v1::EvictResponse* resp) {
  if (req.include_disk() && store_ == nullptr) {
    return absl::FailedPreconditionError("this daemon runs without a disk tier");
  }
  Lock lock(this);
  std::vector<CheckpointId> targets;
  if (req.all()) {
    for (const CheckpointInfo& c : core_->Checkpoints()) {
      if (c.pins == 0 && (c.in_ram || (req.include_disk() && c.on_disk))) targets.push_back(c.id);
    }
  } else {
    if (req.checkpoint_id() == 0) return absl::InvalidArgumentError("evict needs an id or all");
    targets.push_back(req.checkpoint_id());
  }
  for (CheckpointId id : targets) {
    absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
    if (!info.ok()) {
      if (!req.all()) return info.status();
      continue;
    }
    absl::Status s = absl::OkStatus();
    if (info->in_ram) s = core_->Evict(id, "explicit");
    // The disk copy goes too when asked; the kDiskEvict event deletes its files off the lock.
    if (s.ok() && req.include_disk() && info->on_disk) s = core_->EvictDisk(id, "explicit");
    if (s.ok() && !info->in_ram && !req.include_disk()) {
      s = absl::NotFoundError(
          absl::StrCat("checkpoint ", id, " is only on disk (evict with include_disk)"));
    }
    if (!s.ok() && !req.all()) return s;
    if (s.ok()) resp->add_evicted(id);
  }
  AfterCoreLocked();
  return absl::OkStatus();
}

absl::Status CacheDaemon::Flush(const v1::FlushRequest& /*req*/, v1::FlushResponse* resp) {
  if (writer_ == nullptr) {
    resp->set_persisted(0);  // Nothing is ever queued without a disk tier.
    return absl::OkStatus();
  }
  const uint64_t before = writer_->stats().published;
  if (!writer_->WaitIdle(options_.flush_timeout)) {
    return absl::DeadlineExceededError("the disk writer did not drain in time");
  }
  resp->set_persisted(writer_->stats().published - before);
  return absl::OkStatus();
}

std::vector<v1::Event> CacheDaemon::EventsAfter(uint64_t after_seq, size_t limit) const {
  Lock lock(this);
  std::vector<v1::Event> out;
  for (const v1::Event& e : history_) {
    if (e.seq() <= after_seq) continue;
    out.push_back(e);
    if (limit != 0 && out.size() >= limit) break;
  }
  return out;
}

uint64_t CacheDaemon::WaitForEvents(uint64_t after_seq, std::function<void()> wake) {
  Lock lock(this);
  if (!history_.empty() && history_.back().seq() > after_seq) return 0;
  uint64_t token = next_id_++;
  event_waiters_[token] = std::move(wake);
  return token;
}

size_t CacheDaemon::DeferredPersistsForTest() const {
  Lock lock(this);
  return deferred_persists_.size();
}

void CacheDaemon::CancelEventWait(uint64_t token) {
  Lock lock(this);
  event_waiters_.erase(token);
}

}  // namespace cairn::cache
