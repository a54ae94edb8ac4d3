#ifndef CAIRN_SERVICES_CACHE_DISK_DISK_STORE_H_
#define CAIRN_SERVICES_CACHE_DISK_DISK_STORE_H_

// The crash-safe disk tier: chunk files written once and shared, a private-state file (with
// the tail) and a manifest per checkpoint, and a RocksDB catalog (docs/architecture.md §4,
// docs/reliability.md §1). Stores and loads opaque payloads keyed by plain ids; it knows
// nothing of retention ranks or prefix trees (the daemon joins it with the cache core).
//
// Layout under the root: chunks/, states/, manifests/, quarantine/, catalog/ (RocksDB).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/concurrency/mutex.h"
#include "common/time/clock.h"
#include "rocksdb/file_system.h"
#include "services/cache/disk/catalog.h"
#include "services/cache/disk/disk_format.h"
#include "services/cache/disk/file_system.h"

namespace cairn::cache {

// One checkpoint the store holds, as ListCheckpoints reports it.
struct DiskCheckpointInfo {
  uint64_t checkpoint_id = 0;
  uint64_t generation = 0;
  uint64_t depth = 0;
  std::string compat_digest;
  uint64_t bytes_freed = 0;  // Bytes deleting it alone would free now.
  uint64_t file_bytes = 0;   // Its state file and chunk files (what verifying it reads).
};

// A checkpoint found at start-up, as its owner needs it to file it in a prefix index: no file
// names, lengths or checksums (the store keeps those; a restore reads them).
struct RecoveredCheckpoint {
  uint64_t checkpoint_id = 0;
  std::string compat_digest;
  std::string input_digest;
  std::vector<uint32_t> tokens;
  std::vector<ChunkIdentity> chunks;  // In the manifest's order.
  uint64_t state_bytes = 0;           // The state file's sections added up.
  uint32_t capture_kind = 0;
};

struct DiskStoreOptions {
  std::string root;  // --cache-disk.
  // A hard cap on the bytes the store holds: a publish past it is refused. The daemon leaves
  // it 0 (no cap): its policy core owns the disk budget and evicts by rank.
  uint64_t budget_bytes = 0;
  uint64_t staging_bytes = uint64_t{1} << 20;  // docs/architecture.md §4: 1 MiB staging buffers.
  // Files of one restore read and verified at once (the caller's thread and helpers): keeps
  // several reads in flight and spreads the hashing (docs/benchmarks.md, "Disk tier").
  // 1 = on the caller's thread only.
  int restore_threads = 4;
  uint64_t free_space_reserve_bytes = uint64_t{64} << 20;  // IO5: keep this much free.
  int max_quarantined = 32;                                // R5: quarantined manifests kept.
  int io_error_limit = 8;                                  // IO4: this many errors ...
  absl::Duration io_error_window = absl::Minutes(1);       // ... within this window -> read-only.
  uint64_t incarnation = 0;                                // Writer incarnation; 0 = random.
  CatalogOptions catalog;
  // RocksDB's file system for the catalog; nullptr = RocksDB's default (tests pass
  // NewRocksDbFaultFs).
  std::shared_ptr<rocksdb::FileSystem> catalog_fs;
  const Clock* clock = nullptr;  // nullptr = RealClock.
  // Called once per checkpoint recovered at start-up, before Create returns:
  // the daemon rebuilds its prefix index from these.
  std::function<void(RecoveredCheckpoint)> on_recovered;
};

// A new chunk to write: identity and its bytes (e.g. in the arena; read during Publish only).
struct ChunkWrite {
  ChunkIdentity id;
  absl::Span<const uint8_t> bytes;
};

struct PublishRequest {
  uint64_t checkpoint_id = 0;
  std::string compat_digest;
  std::string input_digest;
  std::vector<uint32_t> tokens;            // The checkpoint's depth is tokens.size().
  std::vector<ChunkWrite> new_chunks;      // Written by this publish.
  std::vector<uint64_t> shared_chunk_ids;  // Already durable on disk (P8).
  std::vector<StateSection> sections;      // Layout of `state`.
  absl::Span<const uint8_t> state;         // Private state and tails, section by section.
  uint32_t capture_kind = 0;               // Recorded in the manifest (Manifest::capture_kind).
};

// One piece a restore delivers: a chunk or the state file's payload.
struct RestorePiece {
  FileKind kind = FileKind::kChunk;
  ChunkIdentity chunk;                 // kChunk.
  std::vector<StateSection> sections;  // kState.
  uint64_t bytes = 0;
};
// Returns where a piece's bytes go (exactly `piece.bytes` long).
using RestoreDestination =
    std::function<absl::StatusOr<absl::Span<uint8_t>>(const RestorePiece& piece)>;

struct QuarantineInfo {
  uint64_t checkpoint_id = 0;
  std::string reason;
  uint64_t seq = 0;  // 1, 2, ... in the order this store quarantined (or found) them.
};

struct SweepStats {
  uint64_t files_removed = 0;
  uint64_t bytes_removed = 0;
};

struct DiskStoreStats {
  uint64_t checkpoints = 0;
  uint64_t chunks = 0;
  uint64_t used_bytes = 0;
  uint64_t quarantined = 0;
  uint64_t published = 0;
  uint64_t publish_failures = 0;
  uint64_t restores = 0;
  uint64_t restore_failures = 0;
  uint64_t orphans_removed = 0;
  bool read_only = false;  // IO4: the tier stopped publishing after an I/O failure.
};

// Thread-safe. No lock is held across file I/O.
// Invariants: every chunk in the chunk table is listed by at least one live manifest or
// pinned by an in-flight publish; a live checkpoint's manifest and files were durable before
// it entered the table.
class DiskStore {
 public:
  // Opens or creates the tier at `options.root` and reconciles it (R1, R2): reads the catalog
  // and file sizes (and only the few manifests the catalog lacks), re-registers manifests
  // without a catalog entry, drops entries without a manifest, quarantines checkpoints with
  // missing or wrongly sized files, and rebuilds a corrupt catalog from the manifests. `fs`
  // must outlive the store.
  static absl::StatusOr<std::unique_ptr<DiskStore>> Create(const DiskStoreOptions& options,
                                                           FileSystem* fs);
  ~DiskStore();

  // Publishes a checkpoint in the order P1-P6; OK means acknowledged (durable). Errors:
  // InvalidArgument for a malformed request; AlreadyExists for a checkpoint or new chunk id
  // already on disk; DataLoss for a shared chunk that is not on disk, or whose file is found
  // damaged while the publish runs (a quarantine lost it: the caller may write the checkpoint
  // again with that chunk as a new one; if the manifest was written already, the checkpoint is
  // quarantined under its id, R5); FailedPrecondition for a read-only tier;
  // ResourceExhausted when the budget or free space cannot be made; the I/O error otherwise
  // (nothing is then acknowledged and temporary files are removed).
  // `between_pieces` (may be empty) runs between 1 MiB staging pieces: the writer yields
  // there.
  absl::Status Publish(const PublishRequest& request,
                       const std::function<void()>& between_pieces = nullptr);

  // Deletes a checkpoint in the order P9. NotFound if absent; FailedPrecondition while another
  // Delete of it is under way. While it is read (Restore or Verify), no new read starts and
  // the last read under way deletes it as it ends; Delete then returns OK at once.
  absl::Status Delete(uint64_t checkpoint_id);

  // Restores a checkpoint: asks `destination` where each piece goes (the state file, then every
  // chunk in manifest order, all on the caller's thread), then reads the files,
  // restore_threads at a time, each verified (header identity, size, checksum) as it streams
  // into its destination (R4). On a corrupt or missing file, every checkpoint depending on it
  // is quarantined (R5) and DataLoss is returned: the destination bytes must not be used.
  // NotFound if the checkpoint is not on disk, or if the copy read was found damaged and a new
  // copy was published under its id while it was read (the new copy is left alone).
  absl::Status Restore(uint64_t checkpoint_id, const RestoreDestination& destination);

  // Verifies every file of a checkpoint as Restore does, without copying anything out: the
  // scrubber's and `cairnctl verify`'s check (R7). Quarantines on corruption like Restore.
  absl::Status Verify(uint64_t checkpoint_id);

  // Returns the manifest of a live checkpoint (tokens included). NotFound if absent.
  absl::StatusOr<Manifest> GetManifest(uint64_t checkpoint_id) const;

  // Deletes orphans (R3): *.tmp files, torn manifests, and chunk or state files no live
  // manifest lists, among the files listed before this store began writing. Runs once; later
  // calls find nothing.
  absl::StatusOr<SweepStats> SweepOrphans();

  std::vector<DiskCheckpointInfo> ListCheckpoints() const ABSL_LOCKS_EXCLUDED(mu_);
  // The live checkpoint with the smallest id above `after_id`, or nullopt (the scrubber's
  // cursor).
  std::optional<DiskCheckpointInfo> NextCheckpointAfter(uint64_t after_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<QuarantineInfo> Quarantined() const ABSL_LOCKS_EXCLUDED(mu_);
  // The kept quarantine entries with seq > `after_seq`, oldest first; QuarantinedAfter(0) is
  // Quarantined(). Entries past the R5 bound are gone, newest kept.
  std::vector<QuarantineInfo> QuarantinedAfter(uint64_t after_seq) const ABSL_LOCKS_EXCLUDED(mu_);
  // The seq of the latest quarantine entry (0: none yet).
  uint64_t quarantine_seq() const ABSL_LOCKS_EXCLUDED(mu_);
  bool HasCheckpoint(uint64_t checkpoint_id) const ABSL_LOCKS_EXCLUDED(mu_);
  bool HasChunk(uint64_t chunk_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The largest checkpoint and chunk ids on disk, so the daemon can keep new ids unique. The
  // checkpoint id counts quarantined checkpoints too (those this store quarantined, and those
  // whose catalog entry or kept manifest start-up found), and the reserved ids
  // (ReserveCheckpointIds, found at start-up or made since), so that no id names two
  // checkpoints, even one deleted, pushed out of quarantine or never written.
  uint64_t max_checkpoint_id() const ABSL_LOCKS_EXCLUDED(mu_);
  // Records durably (a synced catalog write) that checkpoint ids up to `up_to` may have been
  // handed out, so that max_checkpoint_id() counts them at every later start; a no-op when
  // they are reserved already. Reservations are written one at a time, so the record only
  // grows. Errors: the catalog's (Unavailable for I/O, ResourceExhausted when out of space);
  // nothing is reserved then.
  absl::Status ReserveCheckpointIds(uint64_t up_to) ABSL_LOCKS_EXCLUDED(mu_);
  // The largest checkpoint id reserved (0: none, as in catalogs written before reservations).
  uint64_t reserved_checkpoint_ids() const ABSL_LOCKS_EXCLUDED(mu_);
  // The largest chunk id listed by a live checkpoint, or reserved (ReserveChunkIds), so that no
  // id names two chunks, even one that lived in RAM only or was deleted from disk.
  uint64_t max_chunk_id() const ABSL_LOCKS_EXCLUDED(mu_);
  // ReserveCheckpointIds and reserved_checkpoint_ids for chunk ids, with a record of their own
  // (0: none, as in catalogs written before chunk ids were reserved).
  absl::Status ReserveChunkIds(uint64_t up_to) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved_chunk_ids() const ABSL_LOCKS_EXCLUDED(mu_);
  DiskStoreStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // The file system's free bytes under the root (a statvfs), less the free-space reserve
  // the store keeps (IO5): what publishes may still use.
  absl::StatusOr<uint64_t> UsableFreeBytes() const;
  uint64_t incarnation() const { return incarnation_; }
  const Catalog& catalog() const { return *catalog_; }

 private:
  struct Record {
    // Without its tokens and chunk entries, to keep memory small: GetManifest re-reads the
    // file, and the entries are in chunks_ (one per chunk however many checkpoints list it).
    Manifest manifest;
    std::vector<uint64_t> chunk_ids;  // The manifest's chunks, in its order.
    uint64_t manifest_bytes = 0;
    uint64_t readers = 0;
    bool deleting = false;  // A Delete is under way: no new readers, not an eviction candidate.
    bool delete_when_read = false;  // Deleted while read: the last reader's end deletes it.
  };
  struct ChunkRecord {
    ManifestChunk entry;
    // Live checkpoints listing it, ascending: a sorted vector, because start-up appends ids
    // in order (640,000 of them for 10,000 checkpoints of 64 chunks) far faster than a tree
    // takes them, and a removal's shift is cheap next to the deletion of files it goes with.
    std::vector<uint64_t> users;
    int pins = 0;  // In-flight publishes sharing it (P8).
    // Its file failed verification (R5): the checkpoints listing it are quarantined, and it
    // stays only while publishes that pinned it run. They fail; HasChunk no longer counts it.
    bool lost = false;
    void AddUser(uint64_t checkpoint_id) {
      if (users.empty() || users.back() < checkpoint_id) {
        users.push_back(checkpoint_id);
        return;
      }
      auto at = std::lower_bound(users.begin(), users.end(), checkpoint_id);
      if (*at != checkpoint_id) users.insert(at, checkpoint_id);
    }
    void RemoveUser(uint64_t checkpoint_id) {
      auto at = std::lower_bound(users.begin(), users.end(), checkpoint_id);
      if (at != users.end() && *at == checkpoint_id) users.erase(at);
    }
  };
  struct Plan;  // One publish in flight.
  // The ids of one kind reserved in the catalog, and whether a reservation is being written.
  struct IdReservation {
    uint64_t up_to = 0;  // As the catalog records it.
    bool writing = false;
  };
  // ReserveCheckpointIds (`chunks` false) and ReserveChunkIds (true).
  absl::Status ReserveIds(bool chunks, uint64_t up_to) ABSL_LOCKS_EXCLUDED(mu_);

  DiskStore(const DiskStoreOptions& options, FileSystem* fs, uint64_t incarnation);

  absl::Status Reconcile();
  absl::Status OpenCatalog();
  absl::Status WipeCatalog();
  // What start-up knows of each entry of its ChunkEntryTable (by index): whether its file was
  // checked, and the chunk record it was registered as (equal entries: no compare needed).
  struct RecoveryState {
    std::vector<bool> file_checked;
    std::vector<ChunkRecord*> record;
  };
  struct ListedFiles;  // A directory as start-up listed and stat'ed it.
  // Checks that the state file of `m` and each of its chunk files (its entries in `table`)
  // were listed and have the manifest's sizes; a chunk entry's file is checked once.
  absl::Status CheckFileSizes(const Manifest& m, absl::Span<const uint32_t> chunk_refs,
                              const ChunkEntryTable& table, const ListedFiles& state_files,
                              const ListedFiles& chunk_files, RecoveryState* recovery);
  // Adds a checkpoint whose files are durable (and checked) to the tables. FailedPrecondition
  // if it lists a chunk differently from a checkpoint already there.
  absl::Status RegisterLocked(const Manifest& manifest, uint64_t manifest_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same at start-up, for a manifest decoded without its chunk entries.
  absl::Status RegisterRecoveredLocked(const Manifest& manifest,
                                       absl::Span<const uint32_t> chunk_refs,
                                       const ChunkEntryTable& table, uint64_t manifest_bytes,
                                       RecoveryState* recovery) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition if checkpoint `checkpoint_id` lists chunk `c` differently from the entry
  // a checkpoint already registered holds for it.
  absl::Status CheckSameChunkLocked(uint64_t checkpoint_id, const ManifestChunk& c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A record of `m`'s fields without tokens or chunks; AddRecordLocked files it as live.
  static Record RecordOf(const Manifest& m, uint64_t manifest_bytes);
  void AddRecordLocked(const Manifest& m, Record r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const ManifestChunk& ChunkEntryLocked(uint64_t chunk_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns `r`'s manifest with its chunk entries (tokens stay dropped).
  Manifest ManifestLocked(const Record& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status ValidateRequest(const PublishRequest& request) const;
  // ResourceExhausted (with the numbers) when `bytes_needed` more bytes would pass the cap
  // or eat into the free-space reserve. Deletes nothing: what to evict is the caller's call.
  absl::Status CheckRoom(uint64_t bytes_needed) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ManifestFile> WriteDataFile(const std::string& dir, const std::string& name,
                                             const std::string& header,
                                             absl::Span<const uint8_t> payload,
                                             const std::function<void()>& between_pieces);
  absl::Status WriteManifest(const Manifest& manifest, const std::string& tmp_path,
                             const std::string& final_path);
  // Reads `path`, checking size, header identity and checksum against the manifest: the
  // payload straight into `destination`, or through `staging` when `destination` is null.
  // `staging` holds headers and footers too; it grows as needed and may be reused.
  absl::Status ReadVerified(const std::string& path, const ManifestFile& expected,
                            const FileHeader& expected_header, uint64_t payload_bytes,
                            uint8_t* destination, std::string* staging);
  absl::Status Load(uint64_t checkpoint_id, const RestoreDestination* destination);
  // Delete's work once it has marked the record `deleting` (and no read is under way).
  absl::Status DeleteClaimed(uint64_t checkpoint_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Run by the last read of a checkpoint deleted while read: DeleteClaimed, failures logged.
  void FinishDeferredDelete(uint64_t checkpoint_id) ABSL_LOCKS_EXCLUDED(mu_);
  // R5: flags `ids` in the catalog, moves their manifests to quarantine/ and drops them from
  // the tables; then keeps only the newest max_quarantined entries. One call at a time.
  absl::Status QuarantineCheckpoints(const std::set<uint64_t>& ids, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the manifest of a publish that cannot be acknowledged (IO2), best effort.
  void Unpublish(const std::string& manifest_path);
  // The first of a publish's pinned shared chunks that was found damaged since (R5), or 0.
  uint64_t LostSharedChunk(const std::vector<uint64_t>& shared_chunk_ids) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t LostSharedChunkLocked(const std::vector<uint64_t>& shared_chunk_ids) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `id` from the tables; returns the files that nothing references any more.
  std::vector<std::string> DropLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpinLocked(const std::vector<uint64_t>& chunk_ids, std::vector<std::string>* orphans)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t BytesFreedLocked(const Record& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DiskCheckpointInfo InfoLocked(uint64_t id, const Record& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteBestEffort(const std::vector<std::string>& paths);
  // Records an I/O error; fsync errors (or too many errors in the window) make the tier
  // read-only (IO1, IO4). Returns `s`.
  absl::Status NoteIoError(absl::Status s, bool sync_failure) ABSL_LOCKS_EXCLUDED(mu_);

  std::string ChunkPath(const std::string& name) const;
  std::string StatePath(const std::string& name) const;
  std::string ManifestPath(uint64_t checkpoint_id) const;

  const DiskStoreOptions options_;
  FileSystem* const fs_;
  const uint64_t incarnation_;
  const Clock* const clock_;
  const std::string chunks_dir_, states_dir_, manifests_dir_, quarantine_dir_, catalog_dir_;
  std::unique_ptr<Catalog> catalog_;

  mutable Mutex mu_;
  std::map<uint64_t, Record> live_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, ChunkRecord> chunks_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> in_flight_ ABSL_GUARDED_BY(mu_);             // Checkpoint ids being published.
  std::set<uint64_t> in_flight_chunks_ ABSL_GUARDED_BY(mu_);      // New chunk ids being written.
  std::vector<QuarantineInfo> quarantined_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  uint64_t quarantine_seq_ ABSL_GUARDED_BY(mu_) = 0;              // The latest entry's seq.
  bool quarantining_ ABSL_GUARDED_BY(mu_) = false;  // A QuarantineCheckpoints call runs.
  CondVar quarantine_done_;                         // Signalled when it ends.
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t max_checkpoint_id_ ABSL_GUARDED_BY(mu_) = 0;
  IdReservation checkpoint_ids_ ABSL_GUARDED_BY(mu_);
  IdReservation chunk_ids_ ABSL_GUARDED_BY(mu_);
  CondVar reserved_;  // Signalled when a reservation's write ends.
  uint64_t max_chunk_id_ ABSL_GUARDED_BY(mu_) = 0;
  // R3: names listed at start-up, before this store wrote anything; consumed by SweepOrphans.
  struct SweepCandidates {
    std::vector<std::string> chunks, states, manifests;
  };
  SweepCandidates sweep_candidates_ ABSL_GUARDED_BY(mu_);
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Duration> recent_errors_ ABSL_GUARDED_BY(mu_);
  DiskStoreStats counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_DISK_STORE_H_
