#ifndef CAIRN_SERVICES_GATEWAY_DASHBOARD_CACHE_MONITOR_H_
#define CAIRN_SERVICES_GATEWAY_DASHBOARD_CACHE_MONITOR_H_

// Reads the cache daemon's inspection calls (GetStatus, GetTree, StreamEvents without
// follow) for /metrics and the dashboard. The gateway talks to cairn-cache directly, with the
// control methods only (the cache hands its arena to cairn-infer's uid alone, SM2): the
// numbers come from the daemon that owns them, not from what the gateway saw pass by.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"

namespace cairn::gateway {

namespace cache_v1 = ::cairn::cache::v1;

struct CacheMonitorOptions {
  std::string address;                                 // "unix:PATH" or "HOST:PORT".
  absl::Duration refresh_interval = absl::Seconds(2);  // How often the calls are made.
  absl::Duration rpc_timeout = absl::Seconds(2);       // Deadline of each call.
  uint32_t max_tree_nodes = 512;                       // GetTree's answer size.
  size_t max_events = 64;                              // Latest events kept.
};

// The cache daemon as of the last refresh.
struct CacheSnapshot {
  std::string address;
  bool up = false;    // The last GetStatus answered.
  std::string error;  // Why not.
  absl::Time refreshed = absl::InfinitePast();
  cache_v1::GetStatusResponse status;
  cache_v1::GetTreeResponse tree;
  std::deque<cache_v1::Event> events;  // Oldest first, at most max_events.
};

// Thread-safe. A background thread refreshes the snapshot every refresh_interval; callers
// read copies, never wait on the daemon.
class CacheMonitor {
 public:
  // Creates the channel and starts refreshing (the first refresh runs at once, in the
  // background). InvalidArgument for an address ValidatePeerAddress refuses (an empty one).
  static absl::StatusOr<std::unique_ptr<CacheMonitor>> Create(const CacheMonitorOptions& options);
  ~CacheMonitor();  // Shutdown().
  CacheMonitor(const CacheMonitor&) = delete;
  CacheMonitor& operator=(const CacheMonitor&) = delete;

  // Stops refreshing and joins the thread. Idempotent.
  void Shutdown();
  CacheSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit CacheMonitor(CacheMonitorOptions options);
  // One round of calls; on the refresher thread only.
  void Refresh() ABSL_LOCKS_EXCLUDED(mu_);

  const CacheMonitorOptions options_;
  std::unique_ptr<cache_v1::CacheService::Stub> stub_;
  mutable Mutex mu_;
  CacheSnapshot snapshot_ ABSL_GUARDED_BY(mu_);
  uint64_t last_seq_ = 0;  // Newest event read; the refresher thread's own.
  Notification stop_;
  std::thread refresher_;
};

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_DASHBOARD_CACHE_MONITOR_H_
