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
  // Sums checked against kMaxStateBytes as they grow, so none can overflow.
  int64_t row_bytes = 0;
  int64_t private_bytes = 0;
  for (size_t i = 0; i < components.size(); ++i) {
    const StateComponent& c = components[i];
    const std::string field = absl::StrCat("components[", i, "]");
    if (c.name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".name is empty"));
    if (!names.insert(c.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name \"", c.name, "\" is used by another component"));
    }
    if (c.kind == ComponentKind::kRows) {
      if (c.private_bytes != 0) {
        return absl::InvalidArgumentError(absl::StrCat(field, " holds rows but has private_bytes"));
      }
      if (c.bytes_per_row < 0 || c.bytes_per_row > kMaxStateBytes - row_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".bytes_per_row must be 0..",
                                                       kMaxStateBytes - row_bytes, ", got ",
                                                       c.bytes_per_row));
      }
      row_bytes += c.bytes_per_row;
    } else {
      if (c.bytes_per_row != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " is private state but has bytes_per_row"));
      }
      if (c.private_bytes < 0 || c.private_bytes > kMaxStateBytes - private_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".private_bytes must be 0..",
                                                       kMaxStateBytes - private_bytes, ", got ",
                                                       c.private_bytes));
      }
      private_bytes += c.private_bytes;
    }
  }
  if (row_bytes == 0 && private_bytes == 0) {
    return absl::InvalidArgumentError("model layout holds zero bytes of state");
  }
  // row_bytes <= kMaxStateBytes (2^48) times up to kMaxTokens (2^24) rows would overflow int64:
  // compare by division instead (chunk_rows >= 1 here).
  if (chunk_rows > kMaxTokens || row_bytes > kMaxStateBytes / chunk_rows) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_rows ", chunk_rows, " of ", row_bytes,
                                                   " bytes each make a chunk larger than ",
                                                   kMaxStateBytes, " bytes"));
  }
  if (row_bytes > kMaxStateBytes / kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("rows of ", row_bytes, " bytes: ", kMaxTokens,
                                                   " tokens would exceed ", kMaxStateBytes,
                                                   " bytes"));
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
