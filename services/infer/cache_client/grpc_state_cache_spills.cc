// GrpcStateCache's spills: the rows of a spill request copied out of their slot into the arena
// (at once, or in the background where the slots' memory copies asynchronously) and answered
// with SpillDone, the spills a slot start or restore waits for, and the background work the
// scheduler runs between steps. The session is in grpc_state_cache.cc, the StateCache calls in
// grpc_state_cache_calls.cc.

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/infer/cache_client/grpc_state_cache.h"

namespace cairn::infer {
namespace {

namespace v1 = ::cairn::cache::v1;

}  // namespace

GrpcStateCache::SpillInFlight GrpcStateCache::StartSpill(std::shared_ptr<Session> session,
                                                         const v1::SpillRequest& request,
                                                         KvMemory* memory) {
  SpillInFlight spill;
  spill.spill_id = request.spill_id();
  spill.memory = memory;
  const StateLayout& layout = memory->layout();
  const int slot = static_cast<int>(request.slot());
  for (const v1::ChunkSpill& chunk : request.chunks()) {
    absl::Status st = slot >= 0 && slot < memory->num_slots()
                          ? absl::OkStatus()
                          : absl::InvalidArgumentError(absl::StrCat("no slot ", slot));
    absl::Span<uint8_t> dest;
    if (st.ok()) {
      absl::StatusOr<absl::Span<uint8_t>> d = Resolve(*session, chunk.destination());
      st = d.status();
      if (d.ok()) dest = *d;
    }
    const int64_t rows = chunk.rows();
    if (st.ok() && static_cast<int64_t>(dest.size()) != rows * layout.row_bytes()) {
      st = absl::InvalidArgumentError("spill destination does not match the chunk's rows");
    }
    size_t offset = 0;
    for (size_t c = 0; st.ok() && c < layout.components.size(); ++c) {
      if (layout.components[c].kind != ComponentKind::kRows) continue;
      const size_t n = static_cast<size_t>(rows * layout.components[c].bytes());
      absl::StatusOr<uint64_t> ticket = memory->CopyRowsOutBackground(
          slot, static_cast<int>(c), static_cast<int64_t>(chunk.first_row()), rows,
          dest.subspan(offset, n));
      st = ticket.status();
      if (ticket.ok()) spill.ticket = std::max(spill.ticket, *ticket);
      offset += n;
    }
    if (st.ok()) {
      spill.chunks.emplace_back(chunk.chunk_id(), dest);
      spill.bytes += static_cast<int64_t>(dest.size());
    } else {
      CAIRN_LOG(WARNING) << "spill " << request.spill_id() << " of chunk " << chunk.chunk_id()
                         << " from slot " << slot << " failed: " << st;
      spill.failed.push_back(chunk.chunk_id());
    }
  }
  spill.session = std::move(session);
  return spill;
}

bool GrpcStateCache::FinishSpill(SpillInFlight& spill, KvMemory* memory, bool wait) {
  absl::Status copied = absl::OkStatus();
  if (wait) {
    copied = memory->WaitBackgroundCopy(spill.ticket);
  } else {
    absl::StatusOr<bool> done = memory->BackgroundCopyDone(spill.ticket);
    if (done.ok() && !*done) return false;
    copied = done.status();
  }
  v1::SessionClientMessage msg;
  v1::SpillDone* done = msg.mutable_spill_done();
  done->set_spill_id(spill.spill_id);
  for (const auto& [chunk_id, dest] : spill.chunks) {
    if (copied.ok()) {
      done->add_chunk_ids(chunk_id);
      done->add_checksums(Xxh3(dest.data(), dest.size()));
    } else {
      done->add_failed_chunk_ids(chunk_id);
    }
  }
  if (!copied.ok()) {
    CAIRN_LOG(WARNING) << "spill " << spill.spill_id << ": copying its rows failed: " << copied;
  }
  for (uint64_t chunk_id : spill.failed) done->add_failed_chunk_ids(chunk_id);
  {
    MutexLock lock(&mu_);
    // A spill of a session that has since been replaced is not answered: the new session's
    // spill ids are its own, and one of them may be this one's number (WriteToStream checks
    // the stream's session again).
    if (session_ != spill.session) {
      CAIRN_LOG(WARNING) << "spill " << spill.spill_id << " of a lost session not answered";
      return true;
    }
    if (done_spills_.insert(spill.spill_id).second) {
      done_order_.push_back(spill.spill_id);
      if (done_order_.size() > kDoneSpillsKept) {
        done_spills_.erase(done_order_.front());
        done_order_.pop_front();
      }
    }
  }
  if (!WriteToStream(msg, spill.session.get())) {
    CAIRN_LOG(WARNING) << "could not report spill " << spill.spill_id << " (session lost)";
  }
  return true;
}

void GrpcStateCache::FinishSpills(KvMemory* memory, bool wait) {
  // Tickets complete in order, so the oldest spill finishes first.
  while (!in_flight_.empty() && FinishSpill(in_flight_.front(), memory, wait)) {
    in_flight_bytes_ -= in_flight_.front().bytes;
    in_flight_.pop_front();
    in_flight_count_.store(static_cast<int>(in_flight_.size()));
  }
}

void GrpcStateCache::FinishBackgroundCopies(KvMemory* memory) { FinishSpills(memory, true); }

void GrpcStateCache::DoSpill(std::shared_ptr<Session> session, const v1::SpillRequest& request,
                             KvMemory* memory) {
  SpillInFlight spill = StartSpill(std::move(session), request, memory);
  FinishSpill(spill, memory, /*wait=*/true);
}

absl::Status GrpcStateCache::DoSpills(const std::vector<uint64_t>& ids, KvMemory* memory) {
  // Spills in flight first: `ids` may name them, and a restore's lease may wait for them.
  FinishSpills(memory, /*wait=*/true);
  if (ids.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Current());
  const uint64_t generation = generation_.load();
  absl::flat_hash_set<uint64_t> remaining(ids.begin(), ids.end());
  const absl::Time deadline = absl::Now() + options_.spill_wait;
  while (!remaining.empty()) {
    v1::SpillRequest request;
    {
      MutexLock lock(&mu_);
      while (true) {
        if (generation_.load() != generation || !connected_.load()) {
          return absl::UnavailableError("cache session lost while spilling");
        }
        for (auto id = remaining.begin(); id != remaining.end();) {
          if (done_spills_.contains(*id)) {
            remaining.erase(id++);
          } else {
            ++id;
          }
        }
        if (remaining.empty()) return absl::OkStatus();
        auto it = std::find_if(spills_.begin(), spills_.end(), [&](const v1::SpillRequest& r) {
          return remaining.contains(r.spill_id());
        });
        if (it != spills_.end()) {
          request = std::move(*it);
          spills_.erase(it);
          break;
        }
        const absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) {
          return absl::DeadlineExceededError(
              absl::StrCat(remaining.size(), " spill requests never arrived"));
        }
        cv_.WaitWithTimeout(&mu_, left);
      }
    }
    remaining.erase(request.spill_id());
    DoSpill(session, request, memory);
  }
  return absl::OkStatus();
}

bool GrpcStateCache::HasBackgroundWork() const {
  if (in_flight_count_.load() > 0) return true;
  MutexLock lock(&mu_);
  return !spills_.empty();
}

bool GrpcStateCache::RunBackgroundWork(KvMemory* memory, absl::Duration budget) {
  FinishSpills(memory, /*wait=*/false);
  absl::StatusOr<std::shared_ptr<Session>> s = Current();
  if (!s.ok()) {
    // The session's arena stays mapped for the copies in flight; answering them fails.
    FinishSpills(memory, /*wait=*/budget > absl::ZeroDuration());
    return HasBackgroundWork();
  }
  // Background spills where the slots' memory copies asynchronously; over host memory (the
  // CPU backend) a copy is done as it starts, so idle spills wait for idle time as before.
  const bool background =
      options_.background_spill_bytes > 0 &&
      (options_.device_memory == nullptr || !options_.device_memory->host_visible());
  const absl::Time deadline = absl::Now() + budget;
  int64_t started = 0;  // Bytes of idle spills started by this call.
  while (true) {
    v1::SpillRequest request;
    {
      MutexLock lock(&mu_);
      // Urgent spills are always done (copying rows below a running slot's position is safe
      // between steps), and at once. Idle ones in the background, while fewer than
      // background_spill_bytes are in flight and this call has started fewer than that (the
      // answers' checksums are hashed on this thread, between steps); otherwise with a budget.
      const bool room = background && in_flight_bytes_ < options_.background_spill_bytes &&
                        started < options_.background_spill_bytes;
      auto it = std::find_if(spills_.begin(), spills_.end(), [&](const v1::SpillRequest& r) {
        return r.urgent() || room || (budget > absl::ZeroDuration() && !background);
      });
      if (it == spills_.end()) break;
      request = std::move(*it);
      spills_.erase(it);
    }
    if (request.urgent() || !background) {
      DoSpill(*s, request, memory);
    } else {
      in_flight_.push_back(StartSpill(*s, request, memory));
      in_flight_bytes_ += in_flight_.back().bytes;
      started += in_flight_.back().bytes;
      in_flight_count_.store(static_cast<int>(in_flight_.size()));
    }
    if (absl::Now() >= deadline && budget > absl::ZeroDuration()) break;
  }
  // With a budget (no slot has work) the copies in flight (at most background_spill_bytes) are
  // waited for rather than polled again at once, so that the scheduler does not spin on them.
  FinishSpills(memory, /*wait=*/budget > absl::ZeroDuration());
  return HasBackgroundWork();
}

}  // namespace cairn::infer
