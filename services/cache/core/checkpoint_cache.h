#ifndef CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_H_
#define CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/time/clock.h"
#include "services/cache/core/capture_planner.h"
#include "services/cache/core/event_log.h"
#include "services/cache/core/ledger.h"
#include "services/cache/core/model_layout.h"
#include "services/cache/core/radix_prefix_index.h"
#include "services/cache/core/retention.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

struct CacheOptions {
  // The daemon's default is half the free RAM, at most this (docs/architecture.md §3).
  static constexpr int64_t kMaxDefaultRamBytes = int64_t{32} << 30;

  int64_t ram_bytes = kMaxDefaultRamBytes;  // RAM tier budget (--cache-ram-bytes).
  int64_t disk_bytes = 0;                   // Disk tier budget; 0 means no disk tier.
  size_t event_ring_capacity = 4096;        // Events kept in RAM.
  RetentionOptions retention;
  PlannerOptions planner;
};

// A place a prompt can resume from.
struct Candidate {
  Tier tier = Tier::kNone;  // kNone: cold.
  int64_t depth = 0;
  CheckpointId checkpoint = 0;  // RAM and disk candidates.
  SlotKey slot;                 // Live candidates.
};

struct LookupRequest {
  Identities identities;
  absl::Span<const TokenId> tokens;
  int64_t stable_boundary = -1;  // -1: unknown.
  // Live frontiers are candidates only in the asking daemon's own slots.
  uint64_t daemon_session = 0;
  // End of the preamble other conversations are expected to share (PlanInput); -1: unknown.
  int64_t shared_boundary = -1;
  // The client's longest prefill pass (PlanInput); 0: PlannerOptions::max_pass_tokens.
  int64_t max_pass_tokens = 0;
};

struct LookupResult {
  Candidate best;                 // Deepest compatible; ties: live > RAM > disk.
  std::vector<Candidate> others;  // The other compatible candidates, deepest first.
  int64_t shared_prefix = 0;      // Longest prefix shared with any cached history.
  CapturePlan plan;               // Assuming `best` is used.
};

// Rows of a chunk that still sit in a slot and must be copied into the arena.
struct ChunkCopy {
  ChunkId id = 0;
  SlotKey slot;
  int64_t row_begin = 0;
  int64_t row_end = 0;
};

// Where the RAM-tier bytes of a chunk are. Moved only by CheckpointCache:
//   kNone -> kBorrowed (a RAM checkpoint references rows that still sit in a slot)
//   kBorrowed -> kSpilling (a spill asks the slot's daemon to copy them into the arena)
//   kSpilling -> kResident (the spill completed), kBorrowed (an idle spill was declined) or
//   kNone (the spill failed: every checkpoint that needed the chunk is dropped)
//   any -> kNone when no RAM checkpoint references the chunk any more (a spilling chunk
//   first finishes its spill: its region may still be written).
enum class Residency { kNone, kBorrowed, kSpilling, kResident };

// "none", "borrowed", "spilling", "resident".
absl::string_view ResidencyName(Residency residency);

// One request to a slot's daemon to copy borrowed rows into the arena. Spill ids are unique
// per cache.
struct SpillInfo {
  uint64_t id = 0;
  SlotKey slot;         // The slot that holds the rows; its daemon owes the spill.
  bool urgent = false;  // The slot is about to be overwritten (or a restore waits for it).
  std::vector<ChunkCopy> chunks;
};

// A restore handed to the slot that continues.
struct RestorePlan {
  Tier tier = Tier::kNone;
  CheckpointId checkpoint = 0;
  int64_t depth = 0;
  std::vector<ChunkId> chunks;  // The restored chunks, now held by the slot.
  int64_t kept_rows = 0;        // Rows the slot already held (same chunk ids), not copied.
  int64_t bytes_to_copy = 0;    // Rows past kept_rows plus private state.
  // Spills of the target slot's borrowed rows: finished before the slot is overwritten.
  std::vector<uint64_t> preserve_spills;
  // RAM restores: spills that must complete before the restored chunks can be read from the
  // arena (chunks still borrowed from a slot, possibly another daemon's). Empty: ready now.
  std::vector<uint64_t> awaiting_spills;
};

// A capture between reservation and commit.
struct CaptureTicket {
  CheckpointId id = 0;
  int64_t depth = 0;
  int64_t own_bytes = 0;            // Private state + tail, reserved in the ledger.
  std::vector<ChunkId> chunks;      // Full chunks referenced, rows [0, depth / chunk_rows).
  std::vector<ChunkCopy> borrowed;  // Referenced chunks whose bytes still sit in a slot.
};

struct PersistTicket {
  CheckpointId id = 0;
  int64_t own_bytes = 0;
  std::vector<ChunkId> new_chunks;  // Chunks not yet on disk: to be written.
};

struct CheckpointInfo {
  CheckpointId id = 0;
  std::string compatibility;
  std::string input;  // Input identity (media digests); empty for text.
  std::string conversation;
  int64_t depth = 0;
  CaptureKind kind = CaptureKind::kEnd;
  bool in_ram = false;
  bool on_disk = false;
  int64_t private_bytes = 0;
  int64_t tail_bytes = 0;
  std::vector<ChunkId> chunks;
  int pins = 0;
};

struct ChunkInfo {
  ChunkId id = 0;
  ComputationId provenance = 0;
  int64_t index = 0;
  int64_t ram_refs = 0;
  int64_t disk_refs = 0;
  Residency residency = Residency::kNone;
  uint64_t spill = 0;            // The spill writing it while kSpilling.
  bool borrowed = false;         // Referenced in RAM while its bytes are not in the arena yet.
  bool in_arena = false;         // kResident.
  std::vector<SlotKey> holders;  // Slots whose live rows are this chunk.
};

// What the RAM tier holds, seed figure 9 style.
struct Accounting {
  int64_t checkpoints = 0;      // In RAM.
  int64_t chunk_bytes = 0;      // Shared rows, each chunk once.
  int64_t private_bytes = 0;    // Private state of every RAM checkpoint.
  int64_t tail_bytes = 0;       // Tails of every RAM checkpoint.
  int64_t full_copy_bytes = 0;  // What the same checkpoints would take as full copies.
  int64_t used = 0;             // Ledger: used + reserved.
  int64_t budget = 0;
};

// Told by CheckpointCache, synchronously and inside the call that caused it, when bytes it
// accounted for are no longer needed, so the owner of the bytes (the daemon's arena and disk
// tier) frees them. Implementations must not call back into the cache; they record work and
// do it after the cache call returns.
class ResidencyListener {
 public:
  virtual ~ResidencyListener() = default;
  // Chunk `id` needs no arena region any more: no RAM checkpoint references it and no spill
  // writes into it.
  virtual void ChunkLeftRam(ChunkId id) = 0;
  // Checkpoint `id` left the RAM tier (evicted, quarantined or its capture rolled back after
  // commit): its private state and tail need no region.
  virtual void CheckpointLeftRam(CheckpointId id) = 0;
  // Checkpoint `id` left the disk tier (evicted or quarantined, or a write in flight was
  // abandoned): its files should be deleted.
  virtual void CheckpointLeftDisk(CheckpointId id) = 0;
  // Spill `spill` ended: `ok` when every chunk it carried is resident now; otherwise
  // `failure` says why (the chunks that failed took their checkpoints with them).
  virtual void SpillFinished(uint64_t spill, bool ok, const std::string& failure) = 0;
};

// The cache policy core: checkpoints and chunks with provenance and reference counts, the
// prefix index (live, RAM and disk candidates in one tree per compatibility identity), the
// byte ledgers, capture planning, retention and the event log. No I/O and no bytes: callers
// copy data and report back. The daemon wraps it behind one mutex; the simulator drives it
// directly.
//
// Protocol for one request (docs/architecture.md §5): Lookup; then ContinueSlot (live), Restore
// (RAM or disk) or StartCold; ExtendSlot as passes complete, BeginCapture/CommitCapture at each
// planned capture; ExtendSlot again for generated tokens.
//
// Retention ranks (RetentionPolicy) need "idle": a conversation is idle when the bytes
// admitted since it was last used (captured, restored or continued) reach the RAM budget, i.e.
// one full turnover of the budget; the admitted-bytes counter is the cache's turnover clock.
//
// Invariants: (1) each ledger's used + reserved never exceeds its budget; (2) a chunk's RAM
// bytes are charged exactly while some RAM checkpoint (committed or pending) references it
// (with RetentionOptions::charge_on_spill: and its bytes are not only borrowed from a slot),
// and its disk bytes while some disk checkpoint does; (3) a chunk record lives while a
// checkpoint references it or a slot holds it; (4) a checkpoint is in the index iff it is in
// RAM or on disk; (5) at most RetentionPolicy::CheckpointCap RAM checkpoints (for the capturing
// layout), pending captures included.
// Thread-compatible.
class CheckpointCache {
 public:
  // Returns InvalidArgument for a negative budget or a zero checkpoint cap. `clock` must
  // outlive the cache.
  static absl::StatusOr<std::unique_ptr<CheckpointCache>> Create(CacheOptions options,
                                                                 const Clock* clock);
  ~CheckpointCache();
  CheckpointCache(const CheckpointCache&) = delete;
  CheckpointCache& operator=(const CheckpointCache&) = delete;

  // Registers the layout of compatibility identity `compatibility`. InvalidArgument for a bad
  // layout; AlreadyExists if a different layout is registered under that identity.
  absl::Status RegisterLayout(const std::string& compatibility, const ModelLayout& layout);

  // Finds the best candidate and plans captures. NotFound for an unregistered identity.
  absl::StatusOr<LookupResult> Lookup(const LookupRequest& request) const;

  // --- Slots (live frontiers). `conversation` names the client conversation for retention.
  // Prepares `slot` for a cold prefill: its rows will be overwritten from row 0. Returns the
  // spills (new ones, and ones already under way for the slot, now urgent) that must finish
  // before the slot is overwritten. Creates the slot on first use.
  absl::StatusOr<std::vector<uint64_t>> StartCold(SlotKey slot, const Identities& identities,
                                                  const std::string& conversation);
  // Continues `slot`'s live frontier in place. FailedPrecondition if the slot's identities
  // differ; NotFound for an unknown slot.
  absl::Status ContinueSlot(SlotKey slot, const Identities& identities,
                            const std::string& conversation);
  // Restores checkpoint `id` into `slot`: rows the slot already holds as the same chunks are
  // kept, borrowed rows about to be overwritten are preserved (plan.preserve_spills), and for a
  // RAM restore, restored chunks not yet in the arena are spilled urgently from the slot that
  // holds them (plan.awaiting_spills). NotFound if it is in no tier; FailedPrecondition on an
  // identity mismatch.
  absl::StatusOr<RestorePlan> Restore(CheckpointId id, SlotKey slot, const Identities& identities,
                                      const std::string& conversation);
  // Appends tokens the slot computed (prefill or generation) to its frontier.
  absl::Status ExtendSlot(SlotKey slot, absl::Span<const TokenId> tokens);
  // Asks for an idle (non-urgent) spill of at most `max_chunks` borrowed chunks of `slot`.
  // Returns its id, or 0 when the slot holds nothing borrowed.
  uint64_t SpillIdle(SlotKey slot, int max_chunks);
  // A restore of `slot` that was handed out waiting for spills will not happen (a spill failed
  // or the lease was released before it was ready): the slot keeps only its first `kept_rows`
  // rows, which it held before the restore.
  void AbandonRestore(SlotKey slot, int64_t kept_rows);
  // The slot is gone (its daemon restarted): checkpoints whose borrowed rows were never spilled
  // are quarantined. Spills the slot owes are failed first.
  void DropSlot(SlotKey slot);

  // --- Spills (the only way borrowed rows reach the arena).
  // Returns the ids of spills created since the last call, oldest first: the caller sends
  // each to the daemon that owns its slot.
  std::vector<uint64_t> TakeNewSpills();
  // NotFound for a spill that is not outstanding.
  absl::StatusOr<SpillInfo> GetSpill(uint64_t spill) const;
  // Ends spill `spill`: chunks in `copied` become resident; chunks in `failed` fail (every
  // checkpoint that needs one is quarantined with `reason`, pending captures rolled back);
  // chunks in neither are declined, which an idle spill may do (they are borrowed again) and
  // an urgent one may not (they fail). NotFound for a spill that is not outstanding;
  // InvalidArgument for a chunk not in the spill.
  absl::Status FinishSpill(uint64_t spill, absl::Span<const ChunkId> copied,
                           absl::Span<const ChunkId> failed, const std::string& reason);
  // Fails every spill owed by the daemon of session `daemon_session` (it ended).
  void FailSpillsOf(uint64_t daemon_session, const std::string& reason);
  // Makes sure every chunk of `chunks` is or will be resident: borrowed ones are spilled
  // urgently from a slot holding them. Returns the spills they wait for (empty: all resident).
  std::vector<uint64_t> AwaitResident(const std::vector<ChunkId>& chunks);
  // Sets the listener told about freed bytes and finished spills; `listener` must outlive the
  // cache (or be reset to nullptr first).
  void SetListener(ResidencyListener* listener) { listener_ = listener; }
  // The tokens of `slot`'s frontier; NotFound for an unknown slot.
  absl::StatusOr<std::vector<TokenId>> SlotTokens(SlotKey slot) const;
  // The bytes overwriting `slot` would have to spill to keep its frontier: its rows that only
  // this slot holds and the arena does not (full chunks only); NotFound for an unknown slot.
  absl::StatusOr<int64_t> SlotSpillBytes(SlotKey slot) const;

  // --- Captures at the slot's current position.
  // Reserves space (evicting by rank if needed) and returns a ticket. AlreadyExists if the same
  // tokens already have a checkpoint; Unavailable, before anything changes, when the ticket's
  // id would pass the limit (LimitCheckpointIds); ResourceExhausted (with a reject event) when
  // even after eviction the capture does not fit.
  absl::StatusOr<CaptureTicket> BeginCapture(SlotKey slot, CaptureKind kind,
                                             const std::string& conversation,
                                             int64_t stable_boundary);
  // Admits the captured checkpoint. NotFound for an unknown ticket.
  absl::StatusOr<CheckpointId> CommitCapture(CheckpointId ticket);
  // Rolls the capture back (the copy failed).
  absl::Status AbortCapture(CheckpointId ticket, const std::string& reason);

  // --- Disk tier.
  // True if checkpoint `id` should be written to disk: prompt kinds (end, reused, stable)
  // unless one on disk or being written sits less than disk_spacing_tokens before it on its
  // path; learned ones always; grid points never.
  // The caller writes a PersistTicket's chunks only once they are in the arena (a borrowed
  // chunk is spilled first); the simulator treats writes as instantaneous.
  bool ShouldPersist(CheckpointId id) const;
  // Reserves disk space (evicting disk checkpoints by rank). FailedPrecondition without a disk
  // tier or when `id` is not in RAM or already on disk; ResourceExhausted if it cannot fit.
  absl::StatusOr<PersistTicket> BeginPersist(CheckpointId id);
  absl::Status CommitPersist(CheckpointId id);
  // The checkpoints whose disk writes are under way and that a write of `id` covers: those
  // whose tokens are a proper prefix of `id`'s (same input identity), except learned ones,
  // which are always written. The caller drops their queued writes (AbortPersist follows).
  std::vector<CheckpointId> PersistsCoveredBy(CheckpointId id) const;
  absl::Status AbortPersist(CheckpointId id);

  // --- Recovery (start-up with a disk tier that already holds checkpoints).
  // Makes every chunk and checkpoint id minted from now on exceed `max_chunk` and
  // `max_checkpoint` (the largest ids found on disk, quarantined checkpoints' included).
  void ReserveIdsAbove(ChunkId max_chunk, CheckpointId max_checkpoint);
  // Lets BeginCapture mint checkpoint ids up to `limit` only: the daemon raises the limit as it
  // reserves ids durably, so that no id is handed out before a restart would skip it. Without
  // a call, there is no limit.
  void LimitCheckpointIds(CheckpointId limit) { checkpoint_id_limit_ = limit; }
  CheckpointId checkpoint_id_limit() const { return checkpoint_id_limit_; }
  // The id the next BeginCapture mints.
  CheckpointId next_checkpoint_id() const { return next_checkpoint_; }
  // The same for chunk ids, which BeginCapture mints for the full chunks a slot computed itself
  // (ChunksToMint): it mints none past `limit`. Without a call, there is no limit.
  void LimitChunkIds(ChunkId limit) { chunk_id_limit_ = limit; }
  ChunkId chunk_id_limit() const { return chunk_id_limit_; }
  ChunkId next_chunk_id() const { return next_chunk_; }
  // The chunk ids a capture of slot `key` at its frontier would mint now (0 for an unknown
  // slot).
  int64_t ChunksToMint(SlotKey key) const;
  // Registers checkpoint `id`, found in the disk tier, as a disk-only checkpoint over `tokens`
  // that references `chunks` (the full chunks covering rows [0, tokens.size()), in order).
  // Chunks not known yet are created disk-resident, with provenance `provenance` (one
  // computation id per recovered run is enough: sharing follows chunk ids). Logs a recover
  // event. NotFound for an unregistered identity; InvalidArgument for a chunk count that does
  // not match the depth or a chunk known at another index; AlreadyExists for a known id;
  // ResourceExhausted when the disk budget cannot hold it.
  absl::Status AdmitRecovered(CheckpointId id, const Identities& identities,
                              absl::Span<const TokenId> tokens, const std::vector<ChunkId>& chunks,
                              CaptureKind kind, ComputationId provenance);
  // A fresh computation id for AdmitRecovered.
  ComputationId NewComputationId() { return next_computation_++; }

  // --- Removal.
  // Evicts checkpoint `id` from RAM (explicit request). NotFound if not in RAM;
  // FailedPrecondition while pinned.
  absl::Status Evict(CheckpointId id, const std::string& reason);
  // Evicts disk checkpoints by rank (events with reason "`why`, <rank>") until at least
  // `bytes` of the disk ledger are freed or nothing more can go. Returns the bytes freed. The
  // daemon calls this when the file system has less room than the ledger thinks (IO5).
  int64_t EvictDiskBytes(int64_t bytes, const std::string& why);
  // Evicts checkpoint `id` from the disk tier (explicit request). NotFound if not on disk;
  // FailedPrecondition while pinned.
  absl::Status EvictDisk(CheckpointId id, const std::string& reason);
  // Drops every checkpoint that references chunk `chunk` from every tier.
  absl::Status QuarantineChunk(ChunkId chunk, const std::string& reason);
  // The disk copy of chunk `chunk` is gone (its file failed verification, or the disk tier
  // deleted it with a quarantined checkpoint); its RAM bytes, if any, are not affected. Every
  // checkpoint on disk that references it loses its disk copy as ForgetDiskCopy says.
  // Checkpoints referencing it only in RAM, and writes in flight (the disk tier refuses one that
  // shares a chunk it no longer has), are left alone; while such writes still reference it, the
  // next BeginPersist of a checkpoint listing it (the retry of a refused one, say) writes it
  // anew, and later ones share that copy. Returns what ForgetDiskCopy returns, for all of them.
  // NotFound for an unknown chunk.
  absl::StatusOr<std::vector<CheckpointId>> ForgetDiskChunk(ChunkId chunk,
                                                            const std::string& reason);
  // The disk copy of checkpoint `id` is gone (the disk tier quarantined it: a file it lists
  // failed verification). Only that copy goes: a checkpoint also in RAM stays there as a
  // RAM-only one (a quarantine event with tier kDisk; its RAM bytes are its own, verified as
  // they entered the arena, never read from the bad file), one only on disk is quarantined. A
  // checkpoint without a disk copy (in RAM only, or with a write of it in flight) is left
  // alone. Returns, in id order, the checkpoints kept as RAM-only ones and the RAM-only ones
  // that were not written because a forgotten copy sat just before them (ShouldPersist's
  // spacing): the caller offers them to ShouldPersist again, as nothing else would write them.
  // NotFound for an unknown or still pending checkpoint.
  absl::StatusOr<std::vector<CheckpointId>> ForgetDiskCopy(CheckpointId id,
                                                           const std::string& reason);
  // Pins keep a checkpoint from eviction while a restore reads it. NotFound for unknown ids.
  absl::Status Pin(CheckpointId id);
  absl::Status Unpin(CheckpointId id);

  // --- Introspection.
  absl::StatusOr<CheckpointInfo> GetCheckpoint(CheckpointId id) const;
  absl::StatusOr<std::vector<TokenId>> CheckpointTokens(CheckpointId id) const;
  absl::StatusOr<ChunkInfo> GetChunk(ChunkId id) const;
  std::vector<CheckpointInfo> Checkpoints() const;  // Sorted by id.
  // The prefix tree of `compatibility`'s checkpoints (RadixPrefixIndex::ExportTree over its
  // checkpoint entries; live frontiers left out), at most `max_nodes` nodes, no tokens copied.
  RadixPrefixIndex::Export CheckpointTree(const std::string& compatibility, size_t max_nodes) const;
  // True if checkpoint `id` is in the RAM tier (false for unknown ids).
  bool InRam(CheckpointId id) const;
  // True while a write of checkpoint `id` to disk is under way (BeginPersist until
  // CommitPersist or AbortPersist).
  bool Persisting(CheckpointId id) const;
  Accounting RamAccounting() const;
  // The same for the disk tier (checkpoints and chunks on disk, the disk ledger).
  Accounting DiskAccounting() const;
  CacheStateSummary Summary() const;
  const ByteLedger& ram_ledger() const { return ram_; }
  const ByteLedger& disk_ledger() const { return disk_; }
  EventLog& events() { return events_; }
  const CapturePlanner& planner() const { return planner_; }
  const RetentionPolicy& retention() const { return retention_; }
  const CacheOptions& options() const { return options_; }
  size_t chunk_count() const { return chunks_.size(); }

 private:
  Accounting TierAccounting(bool ram_tier) const;
  struct Chunk;
  struct Checkpoint;
  struct Slot;
  struct Conversation {
    absl::Time last_use;
    int64_t last_use_mark = 0;  // admitted_bytes_ at the last use.
    // Requests of the conversation (StartCold, ContinueSlot, Restore): when the last one
    // started, and the sum and count of the gaps between consecutive ones
    // (RetentionOptions::overdue_gaps).
    absl::Time last_request;
    absl::Duration gap_sum;
    int64_t gaps = 0;
  };

  CheckpointCache(CacheOptions options, const Clock* clock);

  Slot* FindSlot(SlotKey key);
  Slot& GetOrCreateSlot(SlotKey key);
  RadixPrefixIndex& IndexFor(const std::string& compatibility);
  const ModelLayout* LayoutFor(const std::string& compatibility) const;
  void Touch(const std::string& conversation);
  // A request of `conversation` starts: Touch, and its gap since the previous one is counted.
  void StartRequest(const std::string& conversation);
  bool Idle(const std::string& conversation) const;
  // Not used for more than RetentionOptions::overdue_gaps of its mean gap between requests
  // (of every conversation's, while it has had one request only).
  bool Overdue(const std::string& conversation) const;
  void Emit(Event event);
  Event MakeEvent(EventType type, const Checkpoint& ckpt, std::string reason) const;

  // Chunks.
  ChunkId MintChunk(ComputationId provenance, int64_t index, int64_t bytes, SlotKey holder);
  // True if a new RAM reference to `chunk` finds (or puts) its bytes in the RAM ledger.
  bool ChargedWhenReferenced(const Chunk& chunk) const;
  // Puts `chunk`'s bytes in the RAM ledger (no-op when they are, or when they do not fit:
  // MakeRoomForSpill made room unless a pinned restore reads them).
  void Charge(Chunk& chunk);
  // charge_on_spill: makes free room in the RAM ledger for the referenced, uncharged chunks of
  // `ids` (in row order), evicting by rank (for a preservation, with admission_by_rank, no
  // higher than the checkpoints that need them; `for_restore`: any unpinned one); rows a
  // preservation still cannot fit are dropped from the deepest, with every checkpoint that
  // needs them (reason `why`), unless a pinned checkpoint reads them.
  void MakeRoomForSpill(const std::vector<ChunkId>& ids, bool for_restore, const std::string& why);
  void AddRamRef(Chunk& chunk);
  void DropRamRef(ChunkId id);
  void DropDiskRef(ChunkId id);
  void MaybeFreeChunk(ChunkId id);
  void RemoveHolder(ChunkId id, SlotKey slot);
  // Removes `slot` as holder of its chunks past `keep_chunks`; rows only it holds are spilled
  // urgently. Returns every spill (new or already under way) that must finish first.
  std::vector<uint64_t> PrepareOverwrite(Slot& slot, int64_t keep_chunks);
  // Creates a spill of `copies` (all kBorrowed) from `slot`; 0 when `copies` is empty.
  uint64_t BeginSpill(SlotKey slot, std::vector<ChunkCopy> copies, bool urgent,
                      const std::string& why);
  // The chunk's rows are lost: drops every checkpoint (and pending capture) needing it.
  void FailChunk(ChunkId id, const std::string& reason);
  // The chunk needs no region any more if nothing references it in RAM and no spill writes it.
  void MaybeLeaveRam(Chunk& chunk);
  void ResetSlot(Slot& slot, const Identities& identities);
  void Reindex(Slot& slot);
  void Unindex(Slot& slot);

  // Checkpoints.
  std::vector<RetentionItem> RetentionItems(bool ram_tier) const;
  // RetentionOptions::edit_reach_share: the `items` within edit reach (indices in
  // `reach_inputs`) that save the most tokens, as many as the share of the tier's budget holds
  // in private state, keep their conversation's rank.
  void ProtectEditReach(bool ram_tier, const absl::flat_hash_map<size_t, RankInput>& reach_inputs,
                        std::vector<RetentionItem>& items) const;
  // Evicts the first checkpoint of the tier's eviction order; false when none can go.
  // With `max_rank`, only a checkpoint ranked at or below it. `why`, when set, prefixes the rank
  // in the event's reason.
  bool EvictOne(bool ram_tier, EvictionRank max_rank = EvictionRank::kReused,
                const std::string& why = "");
  void EvictFromRam(Checkpoint& ckpt, const std::string& reason);
  void EvictFromDisk(Checkpoint& ckpt, const std::string& reason);
  void Quarantine(Checkpoint& ckpt, const std::string& reason);
  // Forgets the disk copies of `ids` (all on disk) as ForgetDiskCopy says; returns what it
  // returns for all of them.
  std::vector<CheckpointId> DropDiskCopies(const std::vector<CheckpointId>& ids,
                                           const std::string& reason);
  // The checkpoints on disk or being written less than disk_spacing_tokens before `ckpt` on its
  // path: with one there, ShouldPersist does not write a prompt checkpoint.
  std::vector<CheckpointId> DiskNeighboursBefore(const Checkpoint& ckpt) const;
  // The RAM-only prompt checkpoints that are not written because one of `on_disk` sits among
  // their DiskNeighboursBefore.
  std::vector<CheckpointId> WritesSkippedFor(
      const absl::flat_hash_set<CheckpointId>& on_disk) const;
  // Releases `ckpt`'s disk copy and abandons a write of it in flight (CommitPersist then
  // answers NotFound). Returns whether it had either. Emits nothing.
  bool ReleaseDiskTier(Checkpoint& ckpt);
  void EraseIfGone(CheckpointId id);
  int64_t ChunkBytesMissing(const std::vector<ChunkId>& ids, bool ram) const;

  CacheOptions options_;
  const Clock* clock_;
  CapturePlanner planner_;
  RetentionPolicy retention_;
  ByteLedger ram_;
  ByteLedger disk_;
  EventLog events_;

  absl::flat_hash_map<std::string, ModelLayout> layouts_;
  absl::flat_hash_map<std::string, std::unique_ptr<RadixPrefixIndex>> indexes_;
  absl::flat_hash_map<ChunkId, std::unique_ptr<Chunk>> chunks_;
  absl::flat_hash_map<CheckpointId, std::unique_ptr<Checkpoint>> checkpoints_;
  absl::flat_hash_map<SlotKey, std::unique_ptr<Slot>> slots_;
  absl::flat_hash_map<uint64_t, SlotKey> frontier_slots_;  // Live index entry id -> slot.
  absl::flat_hash_map<std::string, Conversation> conversations_;
  absl::flat_hash_map<uint64_t, SpillInfo> spills_;  // Outstanding spills.
  std::vector<uint64_t> new_spills_;                 // Created, not yet taken.
  ResidencyListener* listener_ = nullptr;

  ChunkId next_chunk_ = 1;
  CheckpointId next_checkpoint_ = 1;
  CheckpointId checkpoint_id_limit_ = std::numeric_limits<CheckpointId>::max();
  ChunkId chunk_id_limit_ = std::numeric_limits<ChunkId>::max();
  ComputationId next_computation_ = 1;
  uint64_t next_frontier_ = 1;
  uint64_t next_spill_ = 1;
  int64_t ram_checkpoints_ = 0;  // Committed + pending RAM checkpoints.
  int64_t admitted_bytes_ = 0;   // Bytes admitted so far: the budget-turnover clock.
  // Every conversation's gaps between requests (RetentionOptions::overdue_gaps).
  absl::Duration gap_sum_;
  int64_t gaps_ = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_H_
