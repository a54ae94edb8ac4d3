#ifndef CAIRN_SERVICES_INFER_CACHE_CLIENT_GRPC_STATE_CACHE_H_
#define CAIRN_SERVICES_INFER_CACHE_CLIENT_GRPC_STATE_CACHE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/shm/arena_client.h"
#include "services/infer/cache_client/arena_pins.h"
#include "services/infer/engine/state_cache.h"
#include "services/infer/engine/state_layout.h"

namespace cairn::infer {

struct GrpcStateCacheOptions {
  std::string address;        // The cache daemon: unix:PATH or HOST:PORT.
  std::string instance_name;  // For the cache's logs and events.
  int slots = 1;
  // Sent with each lookup, so that the cache plans the passes this daemon runs (its
  // --max-pass-tokens) rather than its own default; 0: the cache's.
  int64_t max_pass_tokens = 0;
  std::string model_name;
  cache::v1::CompatibilityIdentity identity;
  StateLayout layout;
  absl::Duration rpc_timeout = absl::Seconds(5);           // Every unary call.
  absl::Duration session_deadline = absl::Hours(24);       // The session stream (then renewed).
  absl::Duration reconnect_min = absl::Milliseconds(100);  // Backoff after a lost session.
  absl::Duration reconnect_max = absl::Seconds(5);
  // A write to the session stream still outstanding after this long ends the session. A cache
  // daemon that stops reading its stream leaves the writer blocked once flow control fills
  // (the scheduler's SpillDone, SlotIdle and SlotBusy, the heartbeats); a watchdog cancels the
  // stream, which fails the write, and the session thread reconnects.
  absl::Duration stream_write_timeout = absl::Seconds(10);
  // How long a slot start or restore start waits for the spill requests it was told about, and
  // how long after its start a restore's lease may take to become ready (PollRestore then gives
  // up on it; the scheduler keeps stepping its other slots meanwhile).
  absl::Duration spill_wait = absl::Seconds(10);
  absl::Duration lease_wait = absl::Seconds(30);
  // How often the one-call Restore polls its waiting lease (and its request's cancellation).
  absl::Duration cancel_poll = absl::Milliseconds(20);
  uint32_t lease_ms = 30000;  // Requested restore lease.
  // Idle-spill work is done this many chunks at a time between the scheduler's checks.
  int idle_spill_chunks_per_slice = 4;
  // Idle spills run in the background (KvMemory::CopyRowsOutBackground: on a GPU, copies on
  // the transfer stream beside the compute), at most this many bytes of them in flight; they
  // start between steps while slots are busy too, and each is answered when its copy is done.
  // 0, or slots in host memory (device_memory host-visible): idle spills only when no slot has
  // work, each copied before the next starts. Also the bytes of idle spills one call of
  // RunBackgroundWork starts, since their answers' checksums are hashed on the scheduler's
  // thread between steps. A step's logits come down to the host after the spills queued
  // before them: on the H200 (55 GB/s) 16 and 64 MB of downloads a step left every decode
  // step as fast as without (MoE at one slot 1.80 / 1.81 against 1.79 ms), 256 MB stretched
  // the MoE steps to the copies' 4.9 ms (hip README, sixteenth round).
  int64_t background_spill_bytes = int64_t{16} << 20;
  // The kernel backend's memory (where the slots live). When it is a device's, the mapped
  // arena is page-locked for it in the cache's pinning steps (ArenaPins).
  DeviceMemory* device_memory = nullptr;
};

// The cache daemon's client (docs/architecture.md §5, docs/cache-protocol.md): one session stream
// with heartbeats, the arena mapped from the descriptor the cache hands over, the model registered,
// and every StateCache call as a unary RPC with a deadline. Spill requests arrive on the stream
// and are done by the scheduler thread (urgent ones before the slot is overwritten, idle ones in
// the background); each is answered by one SpillDone. When the cache daemon is unreachable the
// client reports itself disconnected and reconnects with backoff; a new session (new
// generation) discards every handle of the old one.
//
// Thread roles: the StateCache methods run on the scheduler thread; a session thread reads the
// stream, a heartbeat thread writes heartbeats and a watchdog thread ends the session when a
// write stays outstanding past stream_write_timeout; `connected()` and `generation()` are
// thread-safe. Writes to the stream are serialised by write_mu_, which a write blocked on flow
// control holds: whoever ends a session cancels the stream's context without taking it.
class GrpcStateCache final : public StateCache {
 public:
  // Starts connecting in the background. `wake` is called (from the session thread) when
  // work arrives for the scheduler; it must be quick.
  GrpcStateCache(GrpcStateCacheOptions options, std::function<void()> wake);
  ~GrpcStateCache() override;
  GrpcStateCache(const GrpcStateCache&) = delete;
  GrpcStateCache& operator=(const GrpcStateCache&) = delete;

  // Ends the session and joins the threads. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  bool connected() const override { return connected_.load(); }
  uint64_t generation() const override { return generation_.load(); }

  absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t> prompt, int64_t stable_boundary,
                                   int64_t shared_boundary,
                                   const std::string& conversation) override;
  absl::Status StartSlot(int slot, bool cold, const std::string& conversation,
                         KvMemory* memory) override;
  absl::Status StartRestore(uint64_t checkpoint_id, int slot, const std::string& conversation,
                            KvMemory* memory) override;
  absl::StatusOr<std::optional<RestoreStats>> PollRestore(int slot, KvMemory* memory,
                                                          const RestoreLimits& limits) override;
  void AbandonRestore(int slot, KvMemory* memory, const absl::Status& why) override;
  absl::Status UpdateFrontier(int slot, absl::Span<const int32_t> appended,
                              int64_t expected_depth) override;
  absl::Status Capture(int slot, int64_t depth, CapturePointKind kind,
                       const std::string& conversation, int64_t stable_boundary,
                       KvMemory* memory) override;
  void SlotIdle(int slot) override;
  void SlotBusy(int slot) override;
  bool RunBackgroundWork(KvMemory* memory, absl::Duration budget) override;
  bool HasBackgroundWork() const override;
  void FinishBackgroundCopies(KvMemory* memory) override;

  // Restores checkpoint `checkpoint_id` into `slot` in one call: StartRestore, then PollRestore
  // until it answers, doing the spills the scheduler does between steps (RunBackgroundWork) and
  // waiting for the session's messages between polls. Errors as PollRestore's. For tests and
  // tools; the scheduler polls instead, so that its other slots keep stepping.
  absl::StatusOr<RestoreStats> Restore(uint64_t checkpoint_id, int slot,
                                       const std::string& conversation, KvMemory* memory,
                                       const RestoreLimits& limits) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until connected or `timeout` passes (tests and start-up logs).
  bool WaitConnected(absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

  // LeaseReady answers kept for a restore to read.
  size_t LeaseAnswersForTest() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What one session knows; replaced wholesale on reconnect.
  struct Session {
    std::unique_ptr<cache::v1::CacheService::Stub> stub;
    uint64_t session_id = 0;
    uint64_t model_id = 0;
    uint64_t cache_incarnation = 0;
    std::unique_ptr<MappedArena> arena;
    // Declared after `arena`: released before the arena is unmapped.
    std::unique_ptr<ArenaPins> pins;
  };

  void SessionLoop();
  void HeartbeatLoop();
  // Cancels the stream of a session whose outstanding write is older than
  // stream_write_timeout (the write then fails and the session ends).
  void WatchdogLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one session until the stream ends. Returns true if it got as far as Welcome.
  bool RunSession();
  void OnServerMessage(const cache::v1::SessionServerMessage& m) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes `m` to the session stream; false without one, or when `session` (if not null) is not
  // the stream's session.
  bool WriteToStream(const cache::v1::SessionClientMessage& m, const Session* session = nullptr)
      ABSL_LOCKS_EXCLUDED(write_mu_);
  // The current session, or Unavailable.
  absl::StatusOr<std::shared_ptr<Session>> Current() const ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the status of a failed RPC: Unavailable where the transport failed (the cache may
  // be gone), else the cache's answer.
  absl::Status Lost(const grpc::Status& status, const char* what);
  // Lost, and where that is Unavailable (the transport failed, or the call ran past
  // rpc_timeout: a cache daemon stopped or swamped) also ends `session`, so that the calls of
  // the requests behind this one fail at once instead of each waiting out rpc_timeout on the
  // scheduler thread while every slot's decode waits; the session thread reconnects.
  absl::Status LostSession(const std::shared_ptr<Session>& session, const grpc::Status& status,
                           const char* what) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `session` (when it is still the current one) after a slot start or a restore failed
  // part-way, and returns `why` as Unavailable. The caller overwrites the slot without the
  // cache's leave, while the cache may still count checkpoints' rows as borrowed from it; a
  // later spill would copy the new rows into them. At a session's end the cache drops what its
  // slots lent (docs/cache-protocol.md, "Session end"); the session thread reconnects and the
  // scheduler registers the slots' frontiers again.
  absl::Status EndSession(const std::shared_ptr<Session>& session, const absl::Status& why)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for spill requests `ids` to arrive and does them (and any other queued urgent ones
  // for `slot`). DeadlineExceeded after spill_wait.
  absl::Status DoSpills(const std::vector<uint64_t>& ids, KvMemory* memory)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A spill whose rows are being copied in the background: answered once `ticket` is done.
  struct SpillInFlight {
    std::shared_ptr<Session> session;  // Keeps the arena (and its pins) the copies write.
    KvMemory* memory = nullptr;        // The slots' memory the copies run in.
    uint64_t spill_id = 0;
    int64_t bytes = 0;
    uint64_t ticket = 0;  // The last of its copies (KvMemory::CopyRowsOutBackground).
    // The chunks whose copies started, with their destinations; the ones that failed to.
    std::vector<std::pair<uint64_t, absl::Span<const uint8_t>>> chunks;
    std::vector<uint64_t> failed;
  };
  // Starts copying the rows of one spill request out of its slot into the arena (in the
  // background where the memory can), without answering it.
  SpillInFlight StartSpill(std::shared_ptr<Session> session, const cache::v1::SpillRequest& request,
                           KvMemory* memory);
  // Answers a started spill (SpillDone: checksums of the chunks copied, the failed ones) once
  // its copies are done: waits for them with `wait`, else returns false while they run.
  bool FinishSpill(SpillInFlight& spill, KvMemory* memory, bool wait);
  // Answers the spills in flight whose copies are done (with `wait`, all of them).
  void FinishSpills(KvMemory* memory, bool wait);
  // Copies the rows of one spill request out of its slot into the arena and answers it.
  void DoSpill(std::shared_ptr<Session> session, const cache::v1::SpillRequest& request,
               KvMemory* memory);
  // A restore between StartRestore and its end (scheduler thread only).
  struct RestoreInFlight {
    std::shared_ptr<Session> session;
    uint64_t generation = 0;  // The session's: a restore of an earlier one is lost.
    cache::v1::RestoreLease lease;
    absl::Time started;
    absl::Time give_up;  // started + lease_wait: a lease not ready by then is not waited for.
  };
  // Whether `restore`'s session ended (or its stream is down): its lease went with it.
  bool SessionLost(const RestoreInFlight& restore) const;
  // Gives `restore`'s lease back to the cache: `restored`, else with `failure`; nothing where
  // its session was lost.
  void ReleaseLease(const RestoreInFlight& restore, bool restored, const std::string& failure);
  // Forgets the restore in `slot` (with none left running, the lease answers kept too).
  void EndRestore(int slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the restore in `slot` after `why`: empties the slot, gives the lease back with `why`
  // as its failure and returns `why`.
  absl::Status FailRestore(int slot, KvMemory* memory, const absl::Status& why);
  // Copies the ready lease of the restore in `slot` into the slot and verifies it (rows by
  // chunk, the tail, the private state), validates the slot and gives the lease back. On error
  // the restore failed (FailRestore).
  absl::StatusOr<RestoreStats> CopyRestore(int slot, KvMemory* memory);
  // Waits at most `timeout` for a message a waiting restore may need: a lease's answer, a spill
  // request, the session's end.
  void WaitForRestoreWork(uint64_t lease_id, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<absl::Span<uint8_t>> Resolve(const Session& session,
                                              const cache::v1::ArenaHandle& handle) const;
  // The private-state region of a capture grant or a restore lease: empty, with nothing to map,
  // for a layout without private components (rows only, as plain Qwen3's), which the cache
  // grants as a zero-length handle (docs/model.md §4).
  absl::StatusOr<absl::Span<uint8_t>> ResolvePrivate(const Session& session,
                                                     const cache::v1::ArenaHandle& handle) const;

  const GrpcStateCacheOptions options_;
  const std::function<void()> wake_;
  const uint64_t client_incarnation_;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> next_request_id_{1};
  // The heartbeat period the cache asked for in its Welcome.
  std::atomic<int64_t> heartbeat_ms_{1000};

  mutable Mutex mu_;
  mutable CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ClientContext> stream_context_ ABSL_GUARDED_BY(mu_);
  // Spill requests received and not yet done, in arrival order.
  std::deque<cache::v1::SpillRequest> spills_ ABSL_GUARDED_BY(mu_);
  // Answers to leases that were not ready, by lease id: kept only while a restore runs (between
  // StartRestore and its end; one may arrive before its AcquireRestore answer), and dropped when
  // none does. A restore reads its
  // own lease's answer or releases the lease; an answer that crossed that ReleaseLease, or
  // arrived for a lease already released, is never read: each PollRestore drops those.
  absl::flat_hash_map<uint64_t, cache::v1::LeaseReady> lease_ready_ ABSL_GUARDED_BY(mu_);
  int restores_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Spills this session already answered: a StartSlot or lease may name one of them again
  // (its answer and our SpillDone cross), and then there is nothing left to do.
  // Only the newest kDoneSpillsKept are kept (oldest first in done_order_): a crossing names a
  // spill answered moments before, and a session may live for days.
  static constexpr size_t kDoneSpillsKept = 4096;
  absl::flat_hash_set<uint64_t> done_spills_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> done_order_ ABSL_GUARDED_BY(mu_);
  // Restores between StartRestore and their end, by slot. Scheduler thread only.
  absl::flat_hash_map<int, RestoreInFlight> restores_;
  // Spills started in the background and not yet answered, oldest first, and their bytes.
  // Scheduler thread only (the count is read by HasBackgroundWork from any thread).
  std::deque<SpillInFlight> in_flight_;
  int64_t in_flight_bytes_ = 0;
  std::atomic<int> in_flight_count_{0};

  Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  grpc::ClientReaderWriter<cache::v1::SessionClientMessage, cache::v1::SessionServerMessage>*
      stream_ ABSL_GUARDED_BY(write_mu_) = nullptr;
  const Session* stream_session_ ABSL_GUARDED_BY(write_mu_) = nullptr;  // Whose stream_ it is.
  // When the write to stream_ now outstanding started (steady clock, ns); 0: none. Read by the
  // watchdog without write_mu_, which the outstanding write holds.
  std::atomic<int64_t> write_started_ns_{0};

  std::thread session_thread_;
  std::thread heartbeat_thread_;
  std::thread watchdog_thread_;
};

// Where a lease's or a candidate's state comes from, in the engine's terms.
StateTier ToStateTier(cache::v1::Tier tier);

// The cache's description of a layout: every component in order (rows with their bytes per row,
// private ones with their size), fp32, chunk size.
cache::v1::ModelLayout ToCacheLayout(const StateLayout& layout);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_CACHE_CLIENT_GRPC_STATE_CACHE_H_
