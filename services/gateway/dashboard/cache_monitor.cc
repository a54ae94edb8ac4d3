#include "services/gateway/dashboard/cache_monitor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc/client.h"
#include "common/grpc/peer_address.h"
#include "common/status/annotate.h"
#include "grpcpp/grpcpp.h"

namespace cairn::gateway {

absl::StatusOr<std::unique_ptr<CacheMonitor>> CacheMonitor::Create(
    const CacheMonitorOptions& options) {
  if (absl::Status s = ValidatePeerAddress(options.address); !s.ok()) {
    return Annotate(s, "cache daemon");
  }
  if (options.refresh_interval <= absl::ZeroDuration() ||
      options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("cache refresh interval and timeout must be positive");
  }
  std::unique_ptr<CacheMonitor> monitor(new CacheMonitor(options));
  CacheMonitor* m = monitor.get();
  m->refresher_ = std::thread([m] {
    do {
      m->Refresh();
    } while (!m->stop_.WaitForNotificationWithTimeout(m->options_.refresh_interval));
  });
  return monitor;
}

CacheMonitor::CacheMonitor(CacheMonitorOptions options)
    : options_(std::move(options)),
      stub_(cache_v1::CacheService::NewStub(NewLocalChannel(options_.address))) {
  snapshot_.address = options_.address;
}

CacheMonitor::~CacheMonitor() { Shutdown(); }

void CacheMonitor::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (refresher_.joinable()) refresher_.join();
}

CacheSnapshot CacheMonitor::Snapshot() const {
  MutexLock lock(&mu_);
  return snapshot_;
}

void CacheMonitor::Refresh() {
  // Every call is made without the lock (no lock across an RPC); the snapshot is replaced
  // under it at the end.
  cache_v1::GetStatusResponse status;
  grpc::Status s;
  {
    auto ctx = NewClientContext(options_.rpc_timeout);
    s = stub_->GetStatus(ctx.get(), {}, &status);
  }
  if (!s.ok()) {
    MutexLock lock(&mu_);
    snapshot_.up = false;
    snapshot_.error = absl::StrCat("GetStatus: ", s.error_message());
    snapshot_.refreshed = absl::Now();
    return;
  }
  cache_v1::GetTreeResponse tree;
  {
    cache_v1::GetTreeRequest req;
    req.set_max_nodes(options_.max_tree_nodes);
    auto ctx = NewClientContext(options_.rpc_timeout);
    if (!stub_->GetTree(ctx.get(), req, &tree).ok()) tree.Clear();  // Shown empty.
  }
  uint64_t incarnation = 0;
  {
    MutexLock lock(&mu_);
    incarnation = snapshot_.status.cache_incarnation();
  }
  // A restarted cache numbers its events from 1 again.
  const bool restarted = incarnation != status.cache_incarnation();
  if (restarted) last_seq_ = 0;
  std::deque<cache_v1::Event> fresh;
  {
    cache_v1::StreamEventsRequest req;
    req.set_after_seq(last_seq_);
    req.set_follow(false);
    req.set_limit(0);  // Everything retained since; only the newest max_events are kept.
    auto ctx = NewClientContext(options_.rpc_timeout);
    std::unique_ptr<grpc::ClientReader<cache_v1::Event>> reader =
        stub_->StreamEvents(ctx.get(), req);
    cache_v1::Event e;
    while (reader->Read(&e)) {
      fresh.push_back(e);
      if (fresh.size() > options_.max_events) fresh.pop_front();
    }
    // Events are best effort: a failed read shows fewer; GetStatus decides whether it is up.
    grpc::Status finish = reader->Finish();
    (void)finish;
  }
  if (!fresh.empty()) last_seq_ = fresh.back().seq();
  MutexLock lock(&mu_);
  snapshot_.up = true;
  snapshot_.error.clear();
  snapshot_.refreshed = absl::Now();
  snapshot_.status = std::move(status);
  snapshot_.tree = std::move(tree);
  if (restarted) snapshot_.events.clear();
  for (cache_v1::Event& e : fresh) snapshot_.events.push_back(std::move(e));
  while (snapshot_.events.size() > options_.max_events) snapshot_.events.pop_front();
}

}  // namespace cairn::gateway
