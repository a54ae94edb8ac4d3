#ifndef CAIRN_COMMON_STATUS_STATUS_MACROS_H_
#define CAIRN_COMMON_STATUS_STATUS_MACROS_H_

// Propagation macros over absl::Status / absl::StatusOr. Debian's absl 20220623 ships none;
// after an upgrade, switch to absl's own.
//
//   RETURN_IF_ERROR(DoThing());                 // returns the status if not ok
//   ASSIGN_OR_RETURN(Foo foo, MakeFoo());       // declares `foo` or returns the error
//   ASSIGN_OR_RETURN(existing, MakeFoo());      // assigns to an existing variable

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::status_internal {

inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace cairn::status_internal

#define CAIRN_STATUS_CONCAT_INNER_(a, b) a##b
#define CAIRN_STATUS_CONCAT_(a, b) CAIRN_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                         \
  do {                                                                \
    const auto& cairn_status_value_ = (expr);                         \
    if (!cairn_status_value_.ok()) {                                  \
      return ::cairn::status_internal::AsStatus(cairn_status_value_); \
    }                                                                 \
  } while (false)

#define CAIRN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  CAIRN_ASSIGN_OR_RETURN_IMPL_(CAIRN_STATUS_CONCAT_(cairn_statusor_, __LINE__), lhs, expr)

#endif  // CAIRN_COMMON_STATUS_STATUS_MACROS_H_
