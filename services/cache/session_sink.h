#ifndef CAIRN_SERVICES_CACHE_SESSION_SINK_H_
#define CAIRN_SERVICES_CACHE_SESSION_SINK_H_

#include "cairn/cache/v1/cache.pb.h"

namespace cairn::cache {

// Delivers server messages to one inference daemon's session stream. Implemented by the
// gRPC session reactor. The daemon calls Send with the session table's lock held (that is what
// keeps the sink alive: DetachSession takes the same lock), often under the daemon's lock too,
// so Send must only queue work, never block or call back into the daemon.
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  virtual void Send(v1::SessionServerMessage message) = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SESSION_SINK_H_
