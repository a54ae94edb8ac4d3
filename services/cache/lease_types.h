#ifndef CAIRN_SERVICES_CACHE_LEASE_TYPES_H_
#define CAIRN_SERVICES_CACHE_LEASE_TYPES_H_

// What the restore calls (AcquireRestore, ReleaseLease) and the capture calls (ReserveCapture,
// CommitCapture, AbortCapture) take and answer, in the daemon's own types. proto_convert.h
// converts them from and to cache.proto after the wire checks; idempotent retries by
// client_request_id are the wire side's (cache_rpc.h).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/shm/arena_handle.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// A full chunk handed to a client: rows [first_row, first_row + rows) in `region`, whose
// bytes hash to `checksum` (0: not known yet, LeaseReady brings it).
struct ChunkGrant {
  ChunkId chunk_id = 0;
  uint64_t first_row = 0;
  uint32_t rows = 0;
  ArenaHandle region;
  uint64_t checksum = 0;
};

// A checkpoint's private state or tail in the arena (first_row and rows: tails only).
struct StateGrant {
  uint64_t first_row = 0;
  uint32_t rows = 0;
  ArenaHandle region;  // length 0: none (a depth that is a multiple of a chunk has no tail).
  uint64_t checksum = 0;
};

// A slot asks to continue from checkpoint `checkpoint_id`.
struct RestoreRequest {
  uint64_t session_id = 0;
  uint64_t model_id = 0;
  CheckpointId checkpoint_id = 0;
  uint32_t slot = 0;
  std::string input;         // The input identity as InputDigest makes it.
  std::string conversation;  // A label, within the wire limit.
  absl::Duration lease;      // Asked for; 0: the daemon's default. Capped by the daemon.
};

// A restore lease: where the restored bytes are, valid until released or expired.
struct RestoreGrant {
  uint64_t lease_id = 0;
  uint64_t expires_unix_ms = 0;
  CheckpointId checkpoint_id = 0;
  int64_t depth = 0;
  Tier loaded_from = Tier::kNone;  // kRam, or kDisk (read and verified first).
  int64_t kept_rows = 0;           // Rows the slot already holds and keeps.
  std::vector<ChunkGrant> chunks;  // Full chunks covering rows [kept_rows, full chunks end).
  StateGrant private_state;
  StateGrant tail;
  // false: the spills in awaiting_spills must finish first; LeaseReady says when.
  bool ready = true;
  std::vector<uint64_t> awaiting_spills;
  std::vector<uint64_t> preserve_spills;  // Spills of rows the slot is about to overwrite.
};

// The client is done with lease `lease_id`: restored, or failed with `failure`.
struct LeaseRelease {
  uint64_t session_id = 0;
  uint64_t lease_id = 0;
  bool restored = false;
  std::string failure;
};

// A slot asks for room to capture a checkpoint at its frontier.
struct CaptureRequest {
  uint64_t session_id = 0;
  uint64_t model_id = 0;
  uint32_t slot = 0;
  uint64_t depth = 0;  // Must equal the slot's frontier.
  CaptureKind kind = CaptureKind::kEnd;
  std::string conversation;
  int64_t stable_boundary = -1;  // -1: none.
};

// Where the client copies the capture's private state and tail.
struct CaptureGrant {
  uint64_t reservation_id = 0;  // Also the checkpoint id once committed.
  uint64_t expires_unix_ms = 0;
  StateGrant private_state;
  StateGrant tail;                    // region.length 0: none.
  std::vector<CheckpointId> evicted;  // Removed to make room.
};

// The copy into a reservation is done; the checksums are the client's (0: not given).
struct CaptureCommit {
  uint64_t session_id = 0;
  uint64_t reservation_id = 0;
  uint64_t private_checksum = 0;
  uint64_t tail_checksum = 0;
};

struct CommitResult {
  CheckpointId checkpoint_id = 0;
  bool queued_for_disk = false;
};

struct CaptureAbort {
  uint64_t session_id = 0;
  uint64_t reservation_id = 0;
  std::string reason;  // Empty: "aborted by client".
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_LEASE_TYPES_H_
