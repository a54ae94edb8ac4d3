#include "services/cache/capture_reservations.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"

namespace cairn::cache {

bool CaptureReservations::Add(uint64_t id, Reservation r) {
  MutexLock lock(&mu_);
  return reservations_.try_emplace(id, std::move(r)).second;
}

std::optional<Reservation> CaptureReservations::Take(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return std::nullopt;
  std::optional<Reservation> out(std::move(it->second));
  reservations_.erase(it);
  return out;
}

bool CaptureReservations::Contains(uint64_t id) const {
  MutexLock lock(&mu_);
  return reservations_.contains(id);
}

std::vector<uint64_t> CaptureReservations::Expired(absl::Duration now) const {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, r] : reservations_) {
      if (r.expires <= now) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t CaptureReservations::size() const {
  MutexLock lock(&mu_);
  return reservations_.size();
}

absl::Status VerifyCapture(absl::Span<const uint8_t> bytes, uint64_t private_checksum,
                           uint64_t tail_checksum, StateBytes* state) {
  if (bytes.size() < state->private_bytes + state->tail_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capture region of ", bytes.size(), " bytes cannot hold ", state->private_bytes,
        " bytes of private state and ", state->tail_bytes, " of tail"));
  }
  state->private_checksum = Xxh3(bytes.data(), state->private_bytes);
  state->tail_checksum = Xxh3(bytes.data() + state->private_bytes, state->tail_bytes);
  state->region.checksum = Xxh3(bytes.data(), bytes.size());
  if (private_checksum != 0 && private_checksum != state->private_checksum) {
    return absl::DataLossError("private state checksum mismatch between client and arena");
  }
  if (state->tail_bytes > 0 && tail_checksum != 0 && tail_checksum != state->tail_checksum) {
    return absl::DataLossError("tail checksum mismatch between client and arena");
  }
  return absl::OkStatus();
}

}  // namespace cairn::cache
