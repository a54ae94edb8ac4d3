#include "services/cache/core/model_layout.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

absl::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone:
      return "none";
    case Tier::kLive:
      return "live";
    case Tier::kRam:
      return "ram";
    case Tier::kDisk:
      return "disk";
  }
  return "none";
}

absl::string_view CaptureKindName(CaptureKind kind) {
  switch (kind) {
    case CaptureKind::kEnd:
      return "end";
    case CaptureKind::kReused:
      return "reused";
    case CaptureKind::kStable:
      return "stable";
    case CaptureKind::kLearned:
      return "learned";
    case CaptureKind::kGrid:
      return "grid";
  }
  return "end";
}

absl::Status ModelLayout::Validate() const {
  if (chunk_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_rows must be >= 1, got ", chunk_rows));
  }
  if (components.empty()) return absl::InvalidArgumentError("model layout has no components");
  absl::flat_hash_set<std::string> names;
  for (const StateComponent& c : components) {
    if (c.name.empty()) return absl::InvalidArgumentError("state component without a name");
    if (!names.insert(c.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("state component ", c.name, " repeated"));
    }
    if (c.bytes_per_row < 0 || c.private_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat("state component ", c.name,
                                                     " has a negative size"));
    }
    if (c.kind == ComponentKind::kRows && c.private_bytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows component ", c.name, " has private_bytes"));
    }
    if (c.kind == ComponentKind::kPrivate && c.bytes_per_row != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("private component ", c.name, " has bytes_per_row"));
    }
  }
  if (RowBytes() == 0 && PrivateBytes() == 0) {
    return absl::InvalidArgumentError("model layout holds zero bytes of state");
  }
  return absl::OkStatus();
}

int64_t ModelLayout::RowBytes() const {
  int64_t sum = 0;
  for (const StateComponent& c : components) {
    if (c.kind == ComponentKind::kRows) sum += c.bytes_per_row;
  }
  return sum;
}

int64_t ModelLayout::PrivateBytes() const {
  int64_t sum = 0;
  for (const StateComponent& c : components) {
    if (c.kind == ComponentKind::kPrivate) sum += c.private_bytes;
  }
  return sum;
}

}  // namespace cairn::cache
