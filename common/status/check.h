#ifndef CAIRN_COMMON_STATUS_CHECK_H_
#define CAIRN_COMMON_STATUS_CHECK_H_

// CAIRN_CHECK(cond) guards broken invariants: always on, aborts with file:line and the
// condition. Never CHECK what comes from the network, disk, config or another process: those
// are Statuses (style.md §4). CAIRN_DCHECK is the debug-only form for expensive checks.

namespace cairn::check_internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition);
}  // namespace cairn::check_internal

#define CAIRN_CHECK(cond)                                                         \
  do {                                                                            \
    if (!(cond)) ::cairn::check_internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (false)

#ifdef NDEBUG
#define CAIRN_DCHECK(cond) \
  do {                     \
  } while (false && (cond))
#else
#define CAIRN_DCHECK(cond) CAIRN_CHECK(cond)
#endif

#endif  // CAIRN_COMMON_STATUS_CHECK_H_
