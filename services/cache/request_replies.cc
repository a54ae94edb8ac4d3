#include "services/cache/request_replies.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::cache {

void RequestReplies::OpenSession(uint64_t session) {
  MutexLock lock(&mu_);
  sessions_.try_emplace(session);
}

void RequestReplies::CloseSession(uint64_t session) {
  MutexLock lock(&mu_);
  sessions_.erase(session);
}

absl::StatusOr<std::optional<std::string>> RequestReplies::Begin(uint64_t session,
                                                                 uint64_t request_id,
                                                                 const std::string& method) {
  MutexLock lock(&mu_);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session ", session, " is not open"));
  }
  auto it = s->second.replies.find(request_id);
  if (it != s->second.replies.end()) {
    if (it->second.method != method) {
      return absl::InvalidArgumentError(
          absl::StrCat("client_request_id ", request_id, " was used for ", it->second.method));
    }
    if (!it->second.done) {
      return absl::UnavailableError(
          absl::StrCat("request ", request_id, " is still being handled; retry"));
    }
    return std::optional<std::string>(it->second.answer);
  }
  s->second.replies[request_id] = Reply{method, false, ""};
  s->second.order.push_back(request_id);
  while (s->second.order.size() > kept_) {
    s->second.replies.erase(s->second.order.front());
    s->second.order.pop_front();
  }
  return std::optional<std::string>();
}

void RequestReplies::Finish(uint64_t session, uint64_t request_id,
                            std::optional<std::string> answer) {
  MutexLock lock(&mu_);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  auto it = s->second.replies.find(request_id);
  if (it == s->second.replies.end()) return;  // Pushed out by newer requests meanwhile.
  if (!answer.has_value()) {
    s->second.replies.erase(it);  // Nothing happened: a retry runs again.
    // Its place in the bound goes too: a retry takes a new one, and a stale place would
    // push the retry's answer out early.
    std::deque<uint64_t>& order = s->second.order;
    auto pos = std::find(order.rbegin(), order.rend(), request_id);
    if (pos != order.rend()) order.erase(std::next(pos).base());
    return;
  }
  it->second.done = true;
  it->second.answer = std::move(*answer);
}

size_t RequestReplies::kept(uint64_t session) const {
  MutexLock lock(&mu_);
  auto s = sessions_.find(session);
  return s == sessions_.end() ? 0 : s->second.replies.size();
}

}  // namespace cairn::cache
