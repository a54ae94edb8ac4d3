#ifndef CAIRN_SERVICES_CACHE_REQUEST_REPLIES_H_
#define CAIRN_SERVICES_CACHE_REQUEST_REPLIES_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/concurrency/mutex.h"

namespace cairn::cache {

// The answers to requests that carry a client_request_id, per session, so that a retry gets
// the first answer instead of a second effect (docs/cache-protocol.md, SM14). Keeps the last
// `kept_per_session` answers of each open session; only successes are kept (a failed request
// changed nothing, so its retry runs again).
//
// Thread-safe, with its own mutex; it calls nothing outside itself, so the daemon may call
// it with its own lock held (daemon, then replies).
class RequestReplies {
 public:
  explicit RequestReplies(size_t kept_per_session = 1024) : kept_(kept_per_session) {}

  void OpenSession(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the session's answers; later calls for it are NotFound.
  void CloseSession(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_);

  // Claims (`session`, `request_id`) for `method`. Returns nullopt when the request is new
  // (run it, then call Finish), or the serialized answer of its first run. NotFound for a
  // session that is not open; InvalidArgument when the id was used for another method;
  // Unavailable while the first attempt still runs.
  absl::StatusOr<std::optional<std::string>> Begin(uint64_t session, uint64_t request_id,
                                                   const std::string& method)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records the outcome of a claimed request: its serialized answer, or nullopt when it
  // failed (the claim is dropped so a retry runs again). No-op for a closed session.
  void Finish(uint64_t session, uint64_t request_id, std::optional<std::string> answer)
      ABSL_LOCKS_EXCLUDED(mu_);
  size_t kept(uint64_t session) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Reply {
    std::string method;
    bool done = false;   // False while the first attempt runs.
    std::string answer;  // Once done.
  };
  struct Session {
    absl::flat_hash_map<uint64_t, Reply> replies;
    std::deque<uint64_t> order;  // Oldest first, for the bound.
  };

  const size_t kept_;
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_REQUEST_REPLIES_H_
