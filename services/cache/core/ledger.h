#ifndef CAIRN_SERVICES_CACHE_CORE_LEDGER_H_
#define CAIRN_SERVICES_CACHE_CORE_LEDGER_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::cache {

// Byte accounting for one tier (RAM or disk). Space is reserved before any copy, then either
// committed (the copy succeeded) or rolled back (it failed), so a failure leaves the books as
// they were. Committed bytes are released when their owner goes.
//
// Invariants: 0 <= used() and 0 <= reserved(); used() + reserved() <= budget() at all times
// (Reserve refuses rather than overdraw; SetBudget never goes below what is held).
// Thread-compatible: the cache daemon holds one mutex around the cache.
class ByteLedger {
 public:
  using ReservationId = uint64_t;

  explicit ByteLedger(int64_t budget) : budget_(budget < 0 ? 0 : budget) {}

  // Reserves `bytes`. Returns InvalidArgument for negative sizes and ResourceExhausted (naming
  // the shortfall) when used() + reserved() + bytes would exceed the budget.
  absl::StatusOr<ReservationId> Reserve(int64_t bytes);
  // Turns reservation `id` into used bytes. NotFound for an unknown or finished id.
  absl::Status Commit(ReservationId id);
  // Cancels reservation `id`. NotFound for an unknown or finished id.
  absl::Status Rollback(ReservationId id);
  // Returns `bytes` of committed space. FailedPrecondition if more than used() is released
  // (a bookkeeping bug in the caller; the ledger is left unchanged).
  absl::Status Release(int64_t bytes);
  // Changes the budget. FailedPrecondition if it would drop below used() + reserved().
  absl::Status SetBudget(int64_t budget);

  int64_t budget() const { return budget_; }
  int64_t used() const { return used_; }
  int64_t reserved() const { return reserved_; }
  int64_t free() const { return budget_ - used_ - reserved_; }
  // The largest used() + reserved() ever seen.
  int64_t peak() const { return peak_; }

 private:
  int64_t budget_;
  int64_t used_ = 0;
  int64_t reserved_ = 0;
  int64_t peak_ = 0;
  ReservationId next_id_ = 1;
  absl::flat_hash_map<ReservationId, int64_t> open_;  // Reservation -> bytes.
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_LEDGER_H_
