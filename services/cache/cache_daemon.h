#ifndef CAIRN_SERVICES_CACHE_CACHE_DAEMON_H_
#define CAIRN_SERVICES_CACHE_CACHE_DAEMON_H_

// The cache daemon's state machine: the policy core (CheckpointCache) joined with the bytes
// (the shared-memory arena), the inference daemons' sessions, restore leases and capture
// reservations (docs/architecture.md §1-§5, docs/reliability.md §2). The gRPC adapter
// (cache_service.h) only moves messages between the wire and this class. Every call takes and
// answers the daemon's own types (session_types.h, lookup_types.h, slot_types.h,
// lease_types.h, inspection_types.h); cache_rpc.h converts them next to the gRPC reactors.
// What keeps cache.proto's form: the messages sent down session streams (SessionSink) and the
// event history StreamEvents serves (EventsAfter).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "common/concurrency/thread_pool.h"
#include "common/shm/arena_handle.h"
#include "common/time/clock.h"
#include "services/cache/arena/arena.h"
#include "services/cache/arena/arena_fd_server.h"
#include "services/cache/arena_residency.h"
#include "services/cache/capture_reservations.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/daemon_counters.h"
#include "services/cache/deadline_pool.h"
#include "services/cache/disk/background_writer.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/file_system.h"
#include "services/cache/disk_scrubber.h"
#include "services/cache/event_hub.h"
#include "services/cache/flush_waiters.h"
#include "services/cache/inspection_types.h"
#include "services/cache/lease_types.h"
#include "services/cache/lookup_types.h"
#include "services/cache/request_replies.h"
#include "services/cache/restore_leases.h"
#include "services/cache/session_sink.h"
#include "services/cache/session_table.h"
#include "services/cache/session_types.h"
#include "services/cache/slot_activity.h"
#include "services/cache/slot_types.h"

namespace cairn::cache {

struct CacheDaemonOptions {
  CacheOptions cache;  // Policy: RAM budget, retention, planner.
  ArenaOptions arena;  // size_bytes 0: the RAM budget plus arena_slack_fraction.
  // Extra arena beyond the budget for region alignment (regions are page aligned, so a
  // region wastes up to one page).
  double arena_slack_fraction = 1.0 / 16;
  // Where inference daemons fetch the arena descriptor (SCM_RIGHTS).
  ArenaFdServerOptions fd_server;
  absl::Duration heartbeat_interval = absl::Seconds(1);  // Asked of clients.
  absl::Duration session_timeout = absl::Seconds(10);    // Silence that ends a session.
  absl::Duration default_lease = absl::Seconds(30);      // Restore leases and reservations.
  absl::Duration max_lease = absl::Minutes(2);
  // A restore lease still waiting for spills after this long fails (LeaseReady ok = false) and
  // its checkpoint is unpinned: the spills it waits for may never come. Longer than the
  // reference client's own wait (30 s), which releases the lease itself.
  absl::Duration max_lease_wait = absl::Minutes(1);
  int max_leases_per_session = 64;  // SM8: caps per client.
  int max_reservations_per_session = 64;
  int idle_spill_chunks = 8;    // Chunks per idle-spill work item.
  size_t event_history = 4096;  // Events kept for StreamEvents.
  // The disk tier (--cache-disk): empty = none. Its budget is cache.disk_bytes; 0 means
  // default_disk_share of what the file system can give it (its free space, less the reserve,
  // plus what the tier already holds). A budget above that is reported and bounded to it.
  std::string disk_root;
  double default_disk_share = 0.5;
  DiskStoreOptions disk;  // root and budget are filled in from the above.
  // With a disk tier, checkpoint ids are reserved in the catalog this many at a time (at most
  // 2^40), each block before any of its ids is handed out (one synced write per block), so that
  // a restart never hands out an id again (docs/disk-format.md, "Reserved ids").
  // Without one, ids start at 1 after a restart: nothing from before survives it.
  int64_t checkpoint_id_block = 1024;
  // The same for chunk ids (at most 2^40), which captures mint many more of: a capture that
  // needs more than a block reserves what it needs (docs/disk-format.md, "Reserved ids").
  int64_t chunk_id_block = 65536;
  BackgroundWriterOptions writer;
  FileSystem* file_system = nullptr;  // nullptr = POSIX; tests pass a fault-injecting one.
  absl::Duration flush_timeout = absl::Minutes(5);  // Flush waits at most this long.
  // The daemon's maintenance thread runs Tick this often; 0 = no thread (tests call Tick).
  absl::Duration tick_interval = absl::ZeroDuration();
  // Restores from disk read on this pool, never on the caller's (the general I/O pool's)
  // thread; a load still queued when its deadline passes is answered DeadlineExceeded.
  DeadlinePoolOptions disk_loads{.threads = 2, .max_queued = 64};
  // The background scrubber of the disk tier (R7); bytes_per_second 0 = off (main.cc turns
  // it on from its flag).
  DiskScrubberOptions scrub{.bytes_per_second = 0};
};

// Thread-safe. `mu_` is the coordinating lock: it guards the policy core and what must change
// with it in one step (models, arena regions, slot models, deferred persists), and leases and
// reservations are granted and ended only under it; the public methods that use the core take
// it and do no I/O under it. The session table (sessions, heartbeats, quotas, which leases and
// reservations each session holds), the restore leases, the capture reservations, the replies
// of de-duplicated requests, the event hub, the flush waiters and the disk-load pool have their
// own locks: OpenSession, Touch, DetachSession, BeginDrain, the event calls and the flush calls
// never take `mu_`. Lock order: mu_, then any one of those; none of them calls back. Callable from
// any thread; core callbacks (ResidencyListener) run inside core calls under mu_.
//
// Invariants: (1) every chunk or checkpoint the core holds in RAM has its bytes in an arena
// region recorded here (private state, tail, chunks), and a region is freed only when the
// core no longer needs it and no live lease hands it out; (2) a lease pins its checkpoint in the
// core until it is released or expires; (3) a reservation holds its regions and the core's ticket
// until commit, abort, expiry or the end of its session; (4) every slot a session touched is
// dropped from the core when the session ends.
class CacheDaemon {
 public:
  // Creates the arena (memfd), the descriptor server and the policy core. `clock` must
  // outlive the daemon. InvalidArgument for bad options; Internal if the kernel refuses.
  static absl::StatusOr<std::unique_ptr<CacheDaemon>> Create(const CacheDaemonOptions& options,
                                                             const Clock* clock);
  ~CacheDaemon();
  CacheDaemon(const CacheDaemon&) = delete;
  CacheDaemon& operator=(const CacheDaemon&) = delete;

  // --- The liveness session. `sink` must stay valid until CloseSession(id) returns.
  // `hello` has passed the wire checks (HelloFromProto). Unavailable while draining.
  absl::StatusOr<SessionWelcome> OpenSession(const SessionHello& hello, SessionSink* sink);
  // Records a sign of life. NotFound for an unknown or closed session. Takes only the
  // session table's lock (cheap enough for a gRPC reaction).
  absl::Status Touch(uint64_t session_id);
  // The client messages of the session stream besides heartbeats (Touch); messages of one
  // session must be handed over in the order they arrived (cache_rpc.h does).
  // `slot` NotFound for a session that is not open, InvalidArgument for a slot past the
  // count it declared. SlotIdle may ask for an idle spill of the slot's borrowed rows.
  absl::Status SlotIdle(uint64_t session_id, uint32_t slot) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SlotBusy(uint64_t session_id, uint32_t slot);
  // A spill finished (SpillDone). NotFound when the spill is not outstanding for the session
  // (a duplicate report, too); InvalidArgument for a report that does not match its spill
  // (the spill then fails as a whole); DataLoss when chunks do not match their checksums
  // (those chunks fail, with events).
  absl::Status SpillDone(uint64_t session_id, const SpillReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  // The session's stream is ending: nothing more is sent to its sink, which may be destroyed
  // once this returns; spills that would be sent to it fail at once. Idempotent.
  void DetachSession(uint64_t session_id);
  // Ends a session (stream closed, timed out or peer died): its leases and reservations are
  // released, every spill it owes fails (the checkpoints needing those rows are dropped with
  // events, leases of other sessions waiting for them get LeaseReady ok = false) and its slots
  // are dropped; checkpoints whose borrowed rows were never spilled are dropped with events
  // (SM13). Idempotent.
  void CloseSession(uint64_t session_id, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Refuses new sessions from now on (the daemon is shutting down). Idempotent.
  void BeginDrain();
  // Expires silent sessions, leases and reservations, and fails leases not ready within
  // max_lease_wait. Called periodically.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);

  // --- The unary calls of cache.proto. Each validates its request (InvalidArgument,
  // NotFound for unknown sessions/models/ids, FailedPrecondition for a state mismatch,
  // ResourceExhausted for full budgets or quotas).
  // --- Registration and lookup, in the daemon's own types (lookup_types.h; cache_rpc.h
  // converts them). Requests have passed the wire checks.
  // Registers a model's compatibility identity and layout for an open session (the same
  // identity again: its id, FailedPrecondition if the layout differs) and indexes the
  // checkpoints recovered from disk for it. NotFound for a session that is not open.
  absl::StatusOr<RegisteredModel> RegisterModel(const ModelRegistration& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The candidates for a prompt (live ones only from the session's own slots), the capture
  // plan, and what overwriting each of the session's slots would spill. NotFound for an
  // unknown session or model; InvalidArgument for an empty prompt or boundaries past it.
  absl::StatusOr<LookupAnswer> Lookup(const PromptLookup& req) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Slots, restores and captures, in the daemon's own types (slot_types.h,
  // lease_types.h; cache_rpc.h converts them and de-duplicates retries). Requests have passed
  // the wire checks.
  // A slot starts cold (returns the spills of rows it is about to overwrite, to preserve
  // first) or continues its own frontier (FailedPrecondition when it ran another model).
  absl::StatusOr<std::vector<uint64_t>> StartSlot(const SlotStart& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends tokens to a slot's frontier; returns its new depth. FailedPrecondition when the
  // frontier is not at `req.expected_depth`; InvalidArgument past the token limit.
  absl::StatusOr<uint64_t> UpdateFrontier(const FrontierUpdate& req) ABSL_LOCKS_EXCLUDED(mu_);

  // A restore lease on checkpoint `req.checkpoint_id` for `req.slot`: from RAM answered at
  // once (ready, or waiting for the spills it names), from disk read and verified on this
  // thread. NotFound for unknown sessions, models or checkpoints; FailedPrecondition for a
  // checkpoint of another identity or in no tier that restores; ResourceExhausted when the
  // arena or the session's lease quota is full; DataLoss when the disk copy is corrupt (the
  // checkpoint is quarantined).
  absl::StatusOr<RestoreGrant> AcquireRestore(const RestoreRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // AcquireRestore for the gRPC adapter: a restore from RAM (or a refusal) is answered on this
  // thread; one from disk is read on the disk-load pool and answered there, DeadlineExceeded
  // when `deadline` (on the daemon clock's Now) passed before a loader took it,
  // ResourceExhausted when the pool's queue is full. `done` runs exactly once, without any
  // daemon lock.
  using RestoreDone = absl::AnyInvocable<void(absl::StatusOr<RestoreGrant>) &&>;
  void AcquireRestoreAsync(const RestoreRequest& req, absl::Time deadline, RestoreDone done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a lease: its pin, and a disk restore's regions, are released. NotFound when the
  // session does not hold it.
  absl::Status ReleaseLease(const LeaseRelease& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Reserves the regions for a capture at the slot's frontier (`req.depth` must equal it,
  // else FailedPrecondition); may evict by rank (the grant lists them). ResourceExhausted
  // when the budget, the arena or the reservation quota is full.
  absl::StatusOr<CaptureGrant> ReserveCapture(const CaptureRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Commits a reservation into a checkpoint, with checksums computed over the arena bytes.
  // NotFound when not held; DataLoss when the client's checksums differ; Aborted when the
  // core dropped the capture meanwhile.
  absl::StatusOr<CommitResult> CommitCapture(const CaptureCommit& req) ABSL_LOCKS_EXCLUDED(mu_);
  // NotFound when the session does not hold the reservation.
  absl::Status AbortCapture(const CaptureAbort& req) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Inspection, in the daemon's own types (cache_rpc.h converts them).
  // Budgets, use, sessions and traffic counts. The counts, the session count and the disk's
  // free space are read without the daemon's lock.
  DaemonStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoints of model `model_id` (0: all) in `tier` (kNone: all; kRam, kDisk: where
  // they are served from). NotFound for an unknown model.
  absl::StatusOr<std::vector<CheckpointRow>> Checkpoints(uint64_t model_id, Tier tier) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoint tree of model `model_id` (0: the first registered), at most `max_nodes`
  // nodes. NotFound for an unknown model.
  absl::StatusOr<TreeView> Tree(uint64_t model_id, uint32_t max_nodes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // What a prompt would restore, or why it would miss, with the core's recent events about
  // the checkpoints on its path. NotFound for an unknown model (0: the first registered).
  absl::StatusOr<Explanation> Explain(const ExplainQuery& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Evicts checkpoint `req.checkpoint_id`, or with `all` every unpinned one, from RAM (and from
  // disk with include_disk); returns the ids evicted. One checkpoint: NotFound when unknown or
  // only on disk without include_disk. FailedPrecondition for include_disk without a disk
  // tier; InvalidArgument for neither an id nor all.
  absl::StatusOr<std::vector<CheckpointId>> Evict(const EvictOrder& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Flush: calls `done` once every disk write queued so far has finished (OK, with how many
  // were published meanwhile), once `timeout` (capped at flush_timeout) passes
  // (DeadlineExceeded, seen by Tick), or when the daemon drains (Unavailable). Holds no
  // thread while it waits; `done` runs without the daemon's lock, maybe on this thread.
  // Returns an id for CancelFlush (0 when `done` already ran).
  uint64_t StartFlush(absl::Duration timeout, FlushWaiters::Done done);
  // Answers flush `id` Cancelled if it still waits.
  void CancelFlush(uint64_t id);
  // Answers every waiting flush Unavailable and refuses new ones (the daemon is stopping).
  void AbortFlushes();

  // Events with seq > `after_seq` still in the history, oldest first, at most `limit`
  // (0 = all).
  // Served by the event hub: none of these take the daemon's lock.
  std::vector<v1::Event> EventsAfter(uint64_t after_seq, size_t limit) const;
  // Registers `wake` to run once, without the lock, on the thread that logs the next event.
  // Returns a token for CancelEventWait, or 0 (dropping `wake`) when an event newer than
  // `after_seq` already exists: fetch again instead of waiting. `wake` must be quick.
  uint64_t WaitForEvents(uint64_t after_seq, std::function<void()> wake);
  void CancelEventWait(uint64_t token);

  uint64_t incarnation() const { return incarnation_; }
  // The answers of de-duplicated requests (SM14), kept per session; the wire side uses it.
  RequestReplies& replies() { return replies_; }
  const Arena& arena() const { return *arena_; }
  size_t WaitingFlushesForTest() const { return flushes_->waiting(); }
  // Runs one whole scrub pass on this thread (no-op without a disk tier).
  void ScrubPassForTest();
  // Checkpoints waiting for their chunks to reach the arena before a disk write.
  size_t DeferredPersistsForTest() const ABSL_LOCKS_EXCLUDED(mu_);
  // The disk tier, or nullptr without one.
  DiskStore* disk_store() const { return store_.get(); }
  // The descriptor socket path inference daemons connect to.
  const std::string& fd_socket_path() const { return options_.fd_server.socket_path; }

 private:
  struct Model {
    std::string compatibility;
    ModelLayout layout;
  };
  struct FinishedSpill {
    uint64_t spill = 0;
    bool ok = false;
    std::string failure;
  };
  // Keeps the StreamEvents history from the core's events.
  class Sink;
  // Frees regions and disk files the core no longer needs and notes finished spills.
  class Bytes;
  // Holds mu_; on release, runs the event waiters that new events made due, unlocked.
  class ABSL_SCOPED_LOCKABLE Lock;
  // The Lock of a call that may change the core: on release it first runs AfterCoreLocked,
  // whichever way the call returns (an error after a core change included).
  class ABSL_SCOPED_LOCKABLE CoreLock;

  CacheDaemon(const CacheDaemonOptions& options, const Clock* clock);

  absl::StatusOr<const Model*> FindModelLocked(uint64_t id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition when `slot` last started or restored with another model.
  absl::Status CheckSlotModelLocked(SlotKey slot, uint64_t model_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checks of AcquireRestore and, for a checkpoint in RAM, the whole restore. Returns the
  // lease when it is done, nullopt when the checkpoint must be read from disk (RestoreFromDisk).
  absl::StatusOr<std::optional<RestoreGrant>> BeginRestore(const RestoreRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // ReserveCapture with the ids reserved so far: nullopt, before anything changes, when the
  // core has no checkpoint id left for the capture's ticket or too few chunk ids for the
  // chunks it would mint.
  std::optional<absl::StatusOr<CaptureGrant>> ReserveCaptureWithinIds(const CaptureRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // With a disk tier, when the core has used up the checkpoint ids reserved so far, reserves
  // the next checkpoint_id_block of them in the catalog (a synced write, made without mu_) and
  // then lets the core mint them; likewise chunk ids when those reserved cannot cover the
  // chunks a capture of `req`'s slot would mint (a block, or what it needs if more). A record
  // the store cannot write is logged and the ids used all the same (the RAM tier goes on; only
  // those ids may come back after a restart).
  void ReserveIds(const CaptureRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Builds the message for spill `spill`: destinations are the chunk regions reserved at
  // admission (allocated here if missing). ResourceExhausted when the arena is full.
  absl::StatusOr<v1::SpillRequest> MakeSpillLocked(const SpillInfo& spill)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs after every core call that may create or finish spills (CoreLock runs it on release):
  // sends new spill requests to their sessions (failing those whose session is gone), settles
  // the leases waiting for finished spills, and retries deferred disk writes. Idempotent.
  void AfterCoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendNewSpillsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs AfterCoreLocked now and returns the spills of `spills` still outstanding: the ids a
  // reply tells the client to wait for. A spill the cache could not ask for (no arena extent
  // for its rows) has failed by then, and its request never comes: a client told of it would
  // stall its slots until its spill wait ran out and then end the session. Its rows are
  // forfeit (the checkpoints needing them are gone), so the slot may overwrite them.
  std::vector<uint64_t> OutstandingSpillsLocked(std::vector<uint64_t> spills)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SettleLeasesLocked(const FinishedSpill& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends LeaseReady for lease `id` (ok, or the failure) and, on failure, voids the lease.
  void AnswerLeaseLocked(uint64_t id, bool ok, const std::string& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(uint64_t session_id, v1::SessionServerMessage message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReservationLocked(uint64_t id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseSessionLocked(uint64_t id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues checkpoint `id` for the disk tier if the policy wants it there and its chunks are
  // all in the arena; otherwise remembers it until they are. `after_disk_tasks`: the job
  // reaches the writer only after the disk pool's tasks scheduled so far (the deletion of an
  // earlier copy of `id` among them); a flush waits for it from now on either way.
  void MaybePersistLocked(CheckpointId id, bool after_disk_tasks = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetryDeferredPersistsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint `id` failed verification (`why`, DataLoss): the core forgets the disk copies of
  // it, of the store's quarantines not handled yet, and of the chunks the store no longer has,
  // with events; only what exists nowhere else goes, RAM copies stay. A checkpoint left in RAM
  // only is queued for the disk tier again where the policy wants it there. `id` 0: none
  // failed, only the store's new quarantines are handled.
  void ForgetQuarantinedLocked(CheckpointId id, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The write of `id` was refused because a chunk it shares is no longer on disk (DataLoss):
  // handles the store's new quarantines and queues the write again, unless `retried` (the
  // refused write was that retry).
  void LostSharedChunkLocked(CheckpointId id, bool retried) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The scrubber's report (on its thread).
  void OnScrubFoundCorrupt(CheckpointId id, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The write of `id` failed for lack of space, `shortfall` bytes short: evict by rank and
  // retry the write once.
  void DiskFullLocked(CheckpointId id, int64_t shortfall) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Indexes the checkpoints recovered from disk for `model`; drops (from disk too) those whose
  // files do not fit its layout.
  void AdmitRecoveredLocked(const Model& model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The RAM and disk halves of AcquireRestore.
  absl::StatusOr<RestoreGrant> RestoreFromRamLocked(const RestoreRequest& req, const Model& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RestoreGrant> RestoreFromDisk(const RestoreRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees a disk restore's regions and unpins its checkpoint.
  void DropDiskLoadLocked(CheckpointId id, DiskLoad* load) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the lease answer shared by both tiers and records the lease. REQUIRES: the session
  // table said CheckCanLease OK under this same hold of mu_.
  RestoreGrant GrantLeaseLocked(const RestoreRequest& req, const Model& model,
                                const RestorePlan& plan, const StateBytes& state,
                                const absl::flat_hash_map<ChunkId, HeldRegion>& chunk_regions,
                                Tier tier, std::unique_ptr<DiskLoad> loaded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Model* ModelForLocked(const std::string& compatibility) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration Now() const { return clock_->MonotonicNow(); }
  uint64_t UnixMs(absl::Duration monotonic_deadline) const;

  const CacheDaemonOptions options_;
  const Clock* const clock_;
  const uint64_t incarnation_;
  const absl::Duration started_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<ArenaFdServer> fd_server_;
  RequestReplies replies_;  // Own lock; called under mu_ or alone (daemon, then replies).
  // Own lock; called under mu_ or alone (daemon, then table). Leases and reservations are
  // added to and removed from it only under mu_, so it agrees with leases_ and reservations_
  // whenever mu_ is held.
  SessionTable sessions_;
  DaemonCounters counters_;  // Own lock; counted under mu_ or alone (daemon, then counters).
  // Own locks; leases and reservations are added and taken out only under mu_ (daemon, then
  // these), so they agree with the core's pins and tickets whenever mu_ is held.
  RestoreLeases leases_;
  CaptureReservations reservations_;
  EventHub events_;  // Thread-safe on its own; appended to under mu_ (daemon, then hub).
  std::unique_ptr<Sink> sink_;
  std::unique_ptr<Bytes> bytes_;
  std::unique_ptr<SlotActivity> activity_;
  // The disk tier: thread-safe on its own and used without mu_ (no I/O under the lock).
  std::unique_ptr<DiskStore> store_;
  std::unique_ptr<BackgroundWriter> writer_;
  std::unique_ptr<ThreadPool> disk_pool_;     // Deletions of disk-evicted checkpoints.
  std::unique_ptr<DeadlinePool> disk_loads_;  // Restores from disk (own lock, never under mu_).
  std::unique_ptr<FlushWaiters> flushes_;     // Own lock; never called with mu_ held.
  std::unique_ptr<DiskScrubber> scrubber_;    // Own thread and lock; reports take mu_.
  Notification stop_ticking_;
  std::thread ticker_;  // Runs Tick every tick_interval; started by Create, joined first.

  mutable Mutex mu_;
  std::unique_ptr<CheckpointCache> core_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Model> models_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> model_ids_ ABSL_GUARDED_BY(mu_);
  // The arena regions of the checkpoints and chunks the core keeps in RAM.
  std::unique_ptr<ArenaResidency> regions_ ABSL_GUARDED_BY(mu_);
  // The model each slot last started or restored with (sizes the regions of its spills).
  absl::flat_hash_map<SlotKey, uint64_t> slot_models_ ABSL_GUARDED_BY(mu_);
  std::vector<FinishedSpill> finished_spills_ ABSL_GUARDED_BY(mu_);  // Not yet settled.
  // Checkpoints whose disk write failed for lack of space once: retried once after eviction.
  absl::flat_hash_set<CheckpointId> disk_full_retried_ ABSL_GUARDED_BY(mu_);
  // Checkpoints whose write is the retry after a lost shared chunk (LostSharedChunkLocked),
  // queued or deferred; until that write ends or they leave RAM.
  absl::flat_hash_set<CheckpointId> lost_chunk_retried_ ABSL_GUARDED_BY(mu_);
  // Work to run once the lock is released (event wake-ups, disk jobs); run by ~Lock.
  std::vector<std::function<void()>> after_unlock_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<CheckpointId> deferred_persists_ ABSL_GUARDED_BY(mu_);
  // Checkpoints found on disk at start-up, by compatibility digest, waiting for a model with
  // that identity to register (the layout is needed to index them).
  absl::flat_hash_map<std::string, std::vector<RecoveredCheckpoint>> recovered_
      ABSL_GUARDED_BY(mu_);
  uint64_t persists_queued_ ABSL_GUARDED_BY(mu_) = 0;
  // The store's quarantine entries up to this seq are handled (ForgetQuarantinedLocked); those
  // from before this start name no checkpoint of this run.
  uint64_t quarantine_seen_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions, models, leases, spills, waiters. Starts at a random base per incarnation (SM10):
  // an id a client kept from an earlier incarnation names nothing in this one.
  std::atomic<uint64_t> next_id_{RandomIdBase()};
};

// Holds mu_; on release, runs the work queued in after_unlock_ (event wake-ups, disk jobs)
// without the lock.
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

 protected:
  CacheDaemon* const d_;
};

// Holds mu_ for a call that may change the core; on release runs AfterCoreLocked under the lock
// (on every path out of the call), then what Lock runs unlocked.
class ABSL_SCOPED_LOCKABLE CacheDaemon::CoreLock : public CacheDaemon::Lock {
 public:
  explicit CoreLock(const CacheDaemon* d) ABSL_EXCLUSIVE_LOCK_FUNCTION(d->mu_) : Lock(d) {}
  ~CoreLock() ABSL_UNLOCK_FUNCTION() {
    d_->mu_.AssertHeld();
    d_->AfterCoreLocked();
  }
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CACHE_DAEMON_H_
