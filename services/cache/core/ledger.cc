#include "services/cache/core/ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cairn::cache {

absl::StatusOr<ByteLedger::ReservationId> ByteLedger::Reserve(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative reservation ", bytes));
  if (bytes > free()) {
    return absl::ResourceExhaustedError(absl::StrCat("reserving ", bytes, " bytes: only ",
                                                     free(), " of ", budget_, " free"));
  }
  reserved_ += bytes;
  peak_ = std::max(peak_, used_ + reserved_);
  ReservationId id = next_id_++;
  open_[id] = bytes;
  return id;
}

absl::Status ByteLedger::Commit(ReservationId id) {
  auto it = open_.find(id);
  if (it == open_.end()) return absl::NotFoundError(absl::StrCat("no open reservation ", id));
  reserved_ -= it->second;
  used_ += it->second;
  open_.erase(it);
  return absl::OkStatus();
}

absl::Status ByteLedger::Rollback(ReservationId id) {
  auto it = open_.find(id);
  if (it == open_.end()) return absl::NotFoundError(absl::StrCat("no open reservation ", id));
  reserved_ -= it->second;
  open_.erase(it);
  return absl::OkStatus();
}

absl::Status ByteLedger::Release(int64_t bytes) {
  if (bytes < 0 || bytes > used_) {
    return absl::FailedPreconditionError(
        absl::StrCat("releasing ", bytes, " bytes with ", used_, " in use"));
  }
  used_ -= bytes;
  return absl::OkStatus();
}

absl::Status ByteLedger::SetBudget(int64_t budget) {
  if (budget < used_ + reserved_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "budget ", budget, " below the ", used_ + reserved_, " bytes held"));
  }
  budget_ = budget;
  return absl::OkStatus();
}

}  // namespace cairn::cache
