#ifndef CAIRN_SERVICES_CACHE_DISK_KILL_POINT_H_
#define CAIRN_SERVICES_CACHE_DISK_KILL_POINT_H_

// CAIRN_KILL_POINT(name): in builds without NDEBUG, kills the process with SIGKILL when the
// environment variable CAIRN_KILL_POINT equals `name` (for kill -9 tests that need a precise
// crash point, like RocksDB's TEST_KILL_RANDOM). Compiled out of release builds
// (docs/reliability.md §5.1).

namespace cairn::cache {
// Raises SIGKILL if CAIRN_KILL_POINT names `name`. Thread-safe.
void MaybeKill(const char* name);
}  // namespace cairn::cache

#ifdef NDEBUG
#define CAIRN_KILL_POINT(name) \
  do {                         \
  } while (false)
#else
#define CAIRN_KILL_POINT(name) ::cairn::cache::MaybeKill(name)
#endif

#endif  // CAIRN_SERVICES_CACHE_DISK_KILL_POINT_H_
