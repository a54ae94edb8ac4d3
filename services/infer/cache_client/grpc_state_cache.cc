#include "services/infer/cache_client/grpc_state_cache.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/grpc/client.h"
#include "common/log/log.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace cairn::infer {
namespace {

namespace v1 = ::cairn::cache::v1;

uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) | rd();
  return v;
}

StateTier TierOf(v1::Tier t) {
  switch (t) {
    case v1::TIER_LIVE:
      return StateTier::kLive;
    case v1::TIER_RAM:
      return StateTier::kRam;
    case v1::TIER_DISK:
      return StateTier::kDisk;
    default:
      return StateTier::kCold;
  }
}

CapturePointKind KindOf(v1::CaptureKind k) {
  switch (k) {
    case v1::CAPTURE_KIND_REUSED:
      return CapturePointKind::kReused;
    case v1::CAPTURE_KIND_STABLE:
      return CapturePointKind::kStable;
    case v1::CAPTURE_KIND_GRID:
      return CapturePointKind::kGrid;
    case v1::CAPTURE_KIND_LEARNED:
      return CapturePointKind::kLearned;
    default:
      return CapturePointKind::kEnd;
  }
}

v1::CaptureKind ToProto(CapturePointKind k) {
  switch (k) {
    case CapturePointKind::kEnd:
      return v1::CAPTURE_KIND_END;
    case CapturePointKind::kReused:
      return v1::CAPTURE_KIND_REUSED;
    case CapturePointKind::kStable:
      return v1::CAPTURE_KIND_STABLE;
    case CapturePointKind::kGrid:
      return v1::CAPTURE_KIND_GRID;
    case CapturePointKind::kLearned:
      return v1::CAPTURE_KIND_LEARNED;
  }
  return v1::CAPTURE_KIND_END;
}

ArenaHandle ToHandle(const v1::ArenaHandle& h) {
  return ArenaHandle{h.incarnation(), h.offset(), h.length()};
}

}  // namespace

v1::ModelLayout ToCacheLayout(const StateLayout& layout) {
  v1::ModelLayout out;
  out.set_chunk_rows(static_cast<uint32_t>(layout.rows_per_chunk));
  for (size_t i = 0; i < layout.components.size(); ++i) {
    const StateComponent& c = layout.components[i];
    v1::StateComponent* p = out.add_components();
    p->set_id(static_cast<uint32_t>(i));
    p->set_name(c.name);
    p->set_dtype("f32");
    if (c.kind == ComponentKind::kRows) {
      p->set_kind(v1::COMPONENT_KIND_ROWS);
      p->set_bytes_per_row(static_cast<uint64_t>(c.bytes()));
    } else {
      p->set_kind(v1::COMPONENT_KIND_PRIVATE);
      p->set_private_bytes(static_cast<uint64_t>(c.bytes()));
    }
  }
  return out;
}

GrpcStateCache::GrpcStateCache(GrpcStateCacheOptions options, std::function<void()> wake)
    : options_(std::move(options)),
      wake_(std::move(wake)),
      client_incarnation_(RandomIncarnation()) {
  session_thread_ = std::thread([this] { SessionLoop(); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

GrpcStateCache::~GrpcStateCache() {
  Shutdown();
  // Spills the scheduler left in flight: their copies write into the arena, which goes with
  // their session, so they are waited for (the slots' memory outlives this client).
  if (!in_flight_.empty()) FinishSpills(in_flight_.front().memory, /*wait=*/true);
}

void GrpcStateCache::Shutdown() {
  std::shared_ptr<grpc::ClientContext> ctx;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    ctx = stream_context_;
    cv_.SignalAll();
  }
  if (ctx != nullptr) ctx->TryCancel();
  if (session_thread_.joinable()) session_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

bool GrpcStateCache::WaitConnected(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (!connected_.load()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return true;
}

void GrpcStateCache::SessionLoop() {
  absl::Duration backoff = options_.reconnect_min;
  while (true) {
    const bool welcomed = RunSession();
    connected_.store(false);
    {
      MutexLock lock(&mu_);
      session_.reset();
      stream_context_.reset();
      spills_.clear();
      lease_ready_.clear();
      done_spills_.clear();
      cv_.SignalAll();
      if (stopping_) return;
      if (welcomed) backoff = options_.reconnect_min;
      cv_.WaitWithTimeout(&mu_, backoff);
      if (stopping_) return;
    }
    backoff = std::min(backoff * 2, options_.reconnect_max);
  }
}

bool GrpcStateCache::RunSession() {
  auto session = std::make_shared<Session>();
  session->stub = v1::CacheService::NewStub(NewLocalChannel(options_.address));
  std::shared_ptr<grpc::ClientContext> ctx = NewClientContext(options_.session_deadline);
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    stream_context_ = ctx;
  }
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>>
      stream = session->stub->Session(ctx.get());
  v1::SessionClientMessage hello;
  hello.mutable_hello()->set_instance_name(options_.instance_name);
  hello.mutable_hello()->set_client_incarnation(client_incarnation_);
  hello.mutable_hello()->set_pid(static_cast<uint32_t>(::getpid()));
  hello.mutable_hello()->set_slots(static_cast<uint32_t>(options_.slots));
  v1::SessionServerMessage welcome;
  if (!stream->Write(hello) || !stream->Read(&welcome) || !welcome.has_welcome()) {
    grpc::Status st = stream->Finish();
    CAIRN_LOG(INFO) << "cache daemon at " << options_.address
                    << " not reachable: " << st.error_message();
    return false;
  }
  session->session_id = welcome.welcome().session_id();
  if (welcome.welcome().heartbeat_interval_ms() > 0) {
    heartbeat_ms_.store(welcome.welcome().heartbeat_interval_ms());
  }
  session->cache_incarnation = welcome.welcome().cache_incarnation();
  ArenaClientOptions ao;
  ao.socket_path = welcome.welcome().arena().fd_socket_path();
  ao.expected_incarnation = welcome.welcome().arena().incarnation();
  absl::StatusOr<MappedArena> arena = MappedArena::Connect(ao);
  bool ok = arena.ok();
  if (!ok) {
    CAIRN_LOG(WARNING) << "mapping the cache's arena failed: " << arena.status();
  } else {
    session->arena = std::make_unique<MappedArena>(std::move(*arena));
    const v1::ArenaInfo& grant = welcome.welcome().arena();
    session->pins = std::make_unique<ArenaPins>(options_.device_memory, session->arena->data(),
                                                session->arena->size(), grant.first_pin_bytes(),
                                                grant.pin_step_bytes());
    v1::RegisterModelRequest reg;
    reg.set_session_id(session->session_id);
    *reg.mutable_identity() = options_.identity;
    *reg.mutable_layout() = ToCacheLayout(options_.layout);
    reg.set_model_name(options_.model_name);
    v1::RegisterModelResponse resp;
    std::unique_ptr<grpc::ClientContext> rc = NewClientContext(options_.rpc_timeout);
    grpc::Status st = session->stub->RegisterModel(rc.get(), reg, &resp);
    ok = st.ok();
    if (!ok) {
      CAIRN_LOG(WARNING) << "registering the model with the cache failed: " << st.error_message();
    } else {
      session->model_id = resp.model_id();
      CAIRN_LOG(INFO) << "cache session " << session->session_id << " with " << options_.address
                      << ": " << resp.ram_checkpoints() << " checkpoints in RAM, "
                      << resp.disk_checkpoints() << " on disk";
    }
  }
  if (ok) {
    {
      MutexLock wl(&write_mu_);
      stream_ = stream.get();
      stream_session_ = session.get();
    }
    {
      MutexLock lock(&mu_);
      session_ = session;
      generation_.fetch_add(1);
      connected_.store(true);
      cv_.SignalAll();
    }
    if (wake_) wake_();
    v1::SessionServerMessage m;
    while (stream->Read(&m)) {
      if (m.has_draining()) {
        CAIRN_LOG(INFO) << "cache daemon draining: " << m.draining().reason();
        break;
      }
      OnServerMessage(m);
    }
    connected_.store(false);
    {
      MutexLock wl(&write_mu_);
      stream_ = nullptr;
      stream_session_ = nullptr;
    }
  }
  ctx->TryCancel();
  grpc::Status st = stream->Finish();
  if (ok) CAIRN_LOG(WARNING) << "cache session ended: " << st.error_message();
  if (wake_) wake_();
  return true;
}

void GrpcStateCache::HeartbeatLoop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(heartbeat_ms_.load()));
    if (stopping_) break;
    mu_.Unlock();
    v1::SessionClientMessage hb;
    hb.mutable_heartbeat()->set_sent_unix_ms(
        static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())));
    WriteToStream(hb);
    mu_.Lock();
  }
}

bool GrpcStateCache::WriteToStream(const v1::SessionClientMessage& m, const Session* session) {
  MutexLock lock(&write_mu_);
  if (stream_ == nullptr || (session != nullptr && session != stream_session_)) return false;
  return stream_->Write(m);
}

void GrpcStateCache::OnServerMessage(const v1::SessionServerMessage& m) {
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (m.has_spill_request()) {
      spills_.push_back(m.spill_request());
      wake = true;
    } else if (m.has_lease_ready()) {
      lease_ready_[m.lease_ready().lease_id()] = m.lease_ready();
    } else if (m.has_drop_frontier()) {
      CAIRN_LOG(INFO) << "cache dropped the frontier of slot " << m.drop_frontier().slot() << ": "
                      << m.drop_frontier().reason();
    }
    cv_.SignalAll();
  }
  if (wake && wake_) wake_();
}

absl::StatusOr<std::shared_ptr<GrpcStateCache::Session>> GrpcStateCache::Current() const {
  MutexLock lock(&mu_);
  if (session_ == nullptr || !connected_.load()) {
    return absl::UnavailableError("the cache daemon is not connected");
  }
  return session_;
}

absl::Status GrpcStateCache::Lost(const grpc::Status& status, const char* what) {
  absl::Status s = FromGrpcStatus(status);
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s)) {
    return absl::UnavailableError(absl::StrCat("cache ", what, ": ", s.message()));
  }
  return s;
}

absl::StatusOr<absl::Span<uint8_t>> GrpcStateCache::Resolve(const Session& session,
                                                            const v1::ArenaHandle& handle) const {
  absl::StatusOr<absl::Span<uint8_t>> bytes = session.arena->Resolve(ToHandle(handle));
  if (bytes.ok() && session.pins != nullptr) {
    session.pins->EnsurePinned(handle.offset(), handle.length());
  }
  return bytes;
}

absl::StatusOr<absl::Span<uint8_t>> GrpcStateCache::ResolvePrivate(
    const Session& session, const v1::ArenaHandle& handle) const {
  if (handle.length() == 0) return absl::Span<uint8_t>();
  return Resolve(session, handle);
}

absl::StatusOr<StatePlan> GrpcStateCache::Lookup(absl::Span<const int32_t> prompt,
                                                 int64_t stable_boundary, int64_t shared_boundary,
                                                 const std::string& conversation) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::LookupRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  for (int32_t id : prompt) req.add_tokens(static_cast<uint32_t>(id));
  req.set_stable_boundary(static_cast<uint64_t>(stable_boundary));
  req.set_shared_boundary(static_cast<uint64_t>(shared_boundary));
  req.set_conversation(conversation);
  req.set_max_pass_tokens(static_cast<uint64_t>(std::max<int64_t>(options_.max_pass_tokens, 0)));
  v1::LookupResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->Lookup(ctx.get(), req, &resp);
  if (!st.ok()) return Lost(st, "lookup");
  StatePlan plan;
  auto add = [&](const v1::Candidate& c) {
    StateCandidate out;
    out.tier = TierOf(c.tier());
    out.depth = static_cast<int64_t>(c.depth());
    out.checkpoint_id = c.checkpoint_id();
    if (out.tier == StateTier::kCold) return;
    if (out.tier == StateTier::kLive) {
      // Another daemon's slot is of no use here.
      if (c.session_id() != s->session_id || c.slot() >= static_cast<uint32_t>(options_.slots)) {
        return;
      }
      out.live_slot = static_cast<int>(c.slot());
    }
    plan.candidates.push_back(out);
  };
  if (resp.has_best()) add(resp.best());
  for (const v1::Candidate& c : resp.others()) add(c);
  std::stable_sort(
      plan.candidates.begin(), plan.candidates.end(),
      [](const StateCandidate& a, const StateCandidate& b) { return a.depth > b.depth; });
  plan.shared_prefix = static_cast<int64_t>(resp.shared_prefix());
  for (const v1::CapturePoint& c : resp.plan().captures()) {
    plan.captures.push_back({static_cast<int64_t>(c.position()), KindOf(c.kind())});
  }
  for (uint64_t e : resp.plan().pass_ends()) plan.pass_ends.push_back(static_cast<int64_t>(e));
  plan.miss_reason = resp.miss_reason();
  for (const v1::SlotSpillCost& c : resp.slot_spills()) {
    if (c.slot() >= static_cast<uint32_t>(options_.slots)) continue;  // Not one of ours.
    if (plan.slot_spill_bytes.size() <= c.slot()) plan.slot_spill_bytes.resize(c.slot() + 1, 0);
    plan.slot_spill_bytes[c.slot()] = static_cast<int64_t>(
        std::min<uint64_t>(c.bytes(), static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  }
  return plan;
}

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
    done_spills_.insert(spill.spill_id);
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

absl::Status GrpcStateCache::StartSlot(int slot, bool cold, const std::string& conversation,
                                       KvMemory* memory) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::StartSlotRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_mode(cold ? v1::StartSlotRequest::MODE_COLD : v1::StartSlotRequest::MODE_CONTINUE);
  req.set_conversation(conversation);
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::StartSlotResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->StartSlot(ctx.get(), req, &resp);
  if (!st.ok()) return Lost(st, "start slot");
  return DoSpills({resp.preserve_spills().begin(), resp.preserve_spills().end()}, memory);
}

absl::StatusOr<RestoreStats> GrpcStateCache::Restore(uint64_t checkpoint_id, int slot,
                                                     const std::string& conversation,
                                                     KvMemory* memory) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  const uint64_t generation = generation_.load();
  RestoreStats stats;
  const absl::Time t0 = absl::Now();
  v1::AcquireRestoreRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_checkpoint_id(checkpoint_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_conversation(conversation);
  req.set_client_request_id(next_request_id_.fetch_add(1));
  req.set_lease_ms(options_.lease_ms);
  v1::RestoreLease lease;
  {
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->AcquireRestore(ctx.get(), req, &lease);
    if (!st.ok()) return Lost(st, "acquire restore");
  }
  auto release = [&](bool restored, const std::string& failure) {
    v1::ReleaseLeaseRequest rr;
    rr.set_session_id(s->session_id);
    rr.set_lease_id(lease.lease_id());
    rr.set_restored(restored);
    rr.set_failure(failure);
    v1::ReleaseLeaseResponse unused;
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->ReleaseLease(ctx.get(), rr, &unused);
    if (!st.ok()) {
      CAIRN_LOG(WARNING) << "releasing lease " << lease.lease_id() << ": " << st.error_message();
    }
  };
  auto fail = [&](const absl::Status& why) -> absl::Status {
    absl::Status reset = memory->Reset(slot);
    if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
    release(false, std::string(why.message()));
    return why;
  };

  // The slot's own borrowed rows first: the restore overwrites them.
  absl::Status spilled =
      DoSpills({lease.preserve_spills().begin(), lease.preserve_spills().end()}, memory);
  if (!spilled.ok()) return fail(spilled);
  if (!lease.ready()) {
    // Rows still borrowed in other slots are being spilled; ours among them are done here.
    const absl::Time deadline = absl::Now() + options_.lease_wait;
    while (true) {
      std::optional<v1::SpillRequest> work;
      std::optional<v1::LeaseReady> answer;
      {
        MutexLock lock(&mu_);
        while (true) {
          if (generation_.load() != generation || !connected_.load()) break;
          if (auto it = lease_ready_.find(lease.lease_id()); it != lease_ready_.end()) {
            answer = it->second;
            lease_ready_.erase(it);
            break;
          }
          if (!spills_.empty()) {
            work = std::move(spills_.front());
            spills_.pop_front();
            break;
          }
          const absl::Duration left = deadline - absl::Now();
          if (left <= absl::ZeroDuration()) break;
          cv_.WaitWithTimeout(&mu_, left);
        }
      }
      if (work.has_value()) {
        DoSpill(s, *work, memory);
        continue;
      }
      if (!answer.has_value()) {
        return fail(absl::UnavailableError("restore lease never became ready"));
      }
      if (!answer->ok()) {
        // The lease is void on the server: nothing to release.
        absl::Status reset = memory->Reset(slot);
        if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
        return absl::NotFoundError(absl::StrCat("restore lease failed: ", answer->failure()));
      }
      // The chunks that were not resident when the lease was answered, now with checksums.
      for (const v1::ChunkRegion& ready : answer->chunks()) {
        for (v1::ChunkRegion& c : *lease.mutable_chunks()) {
          if (c.chunk_id() == ready.chunk_id()) c = ready;
        }
      }
      break;
    }
  }
  stats.wait = absl::Now() - t0;
  const absl::Time t1 = absl::Now();

  const StateLayout& layout = memory->layout();
  const int64_t depth = static_cast<int64_t>(lease.depth());
  absl::Status st = memory->BeginRestore(slot, static_cast<int64_t>(lease.kept_rows()));
  if (!st.ok()) return fail(st);
  // Copies one region's rows (every rows component, one after another) into the slot.
  auto copy_rows = [&](const v1::ArenaHandle& handle, uint64_t checksum, int64_t first_row,
                       int64_t rows) -> absl::Status {
    ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes, Resolve(*s, handle));
    if (static_cast<int64_t>(bytes.size()) != rows * layout.row_bytes()) {
      return absl::DataLossError("a restored region does not match its rows");
    }
    if (Xxh3(bytes.data(), bytes.size()) != checksum) {
      return absl::DataLossError(
          absl::StrCat("checksum mismatch in rows ", first_row, "..", first_row + rows));
    }
    size_t offset = 0;
    for (size_t c = 0; c < layout.components.size(); ++c) {
      if (layout.components[c].kind != ComponentKind::kRows) continue;
      const size_t n = static_cast<size_t>(rows * layout.components[c].bytes());
      RETURN_IF_ERROR(
          memory->CopyRowsIn(slot, static_cast<int>(c), first_row, bytes.subspan(offset, n)));
      offset += n;
    }
    stats.rows_copied += rows;
    return absl::OkStatus();
  };
  std::vector<const v1::ChunkRegion*> chunks;
  for (const v1::ChunkRegion& c : lease.chunks()) chunks.push_back(&c);
  std::sort(chunks.begin(), chunks.end(), [](const v1::ChunkRegion* a, const v1::ChunkRegion* b) {
    return a->first_row() < b->first_row();
  });
  for (const v1::ChunkRegion* c : chunks) {
    st = copy_rows(c->region(), c->checksum(), static_cast<int64_t>(c->first_row()), c->rows());
    if (!st.ok()) return fail(st);
  }
  if (lease.tail().rows() > 0) {
    st = copy_rows(lease.tail().region(), lease.tail().checksum(),
                   static_cast<int64_t>(lease.tail().first_row()), lease.tail().rows());
    if (!st.ok()) return fail(st);
  }
  absl::StatusOr<absl::Span<uint8_t>> priv = ResolvePrivate(*s, lease.private_state().region());
  if (!priv.ok()) return fail(priv.status());
  // An empty private state (rows-only layout) has no bytes to verify; the cache keeps no
  // checksum for a checkpoint whose state region is empty.
  if (!priv->empty() && Xxh3(priv->data(), priv->size()) != lease.private_state().checksum()) {
    return fail(absl::DataLossError("checksum mismatch in the private state"));
  }
  st = memory->LoadPrivateState(slot, depth, *priv);
  if (st.ok()) st = memory->Validate(slot, depth);
  if (!st.ok()) return fail(st);
  release(true, "");
  stats.copy = absl::Now() - t1;
  stats.depth = depth;
  stats.tier = TierOf(lease.loaded_from());
  return stats;
}

absl::Status GrpcStateCache::UpdateFrontier(int slot, absl::Span<const int32_t> appended,
                                            int64_t expected_depth) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::UpdateFrontierRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  for (int32_t id : appended) req.add_append_tokens(static_cast<uint32_t>(id));
  req.set_expected_depth(static_cast<uint64_t>(expected_depth));
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::UpdateFrontierResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->UpdateFrontier(ctx.get(), req, &resp);
  if (!st.ok()) return Lost(st, "frontier update");
  return absl::OkStatus();
}

absl::Status GrpcStateCache::Capture(int slot, int64_t depth, CapturePointKind kind,
                                     const std::string& conversation, int64_t stable_boundary,
                                     KvMemory* memory) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::ReserveCaptureRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_depth(static_cast<uint64_t>(depth));
  req.set_kind(ToProto(kind));
  req.set_conversation(conversation);
  req.set_stable_boundary(static_cast<uint64_t>(stable_boundary));
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::CaptureReservation res;
  {
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->ReserveCapture(ctx.get(), req, &res);
    if (!st.ok()) return Lost(st, "reserve capture");
  }
  auto copy = [&]() -> absl::StatusOr<std::pair<uint64_t, uint64_t>> {
    ASSIGN_OR_RETURN(absl::Span<uint8_t> priv, ResolvePrivate(*s, res.private_state().region()));
    ASSIGN_OR_RETURN(int64_t position, memory->CapturePrivateState(slot, priv));
    if (position != depth) {
      return absl::FailedPreconditionError(
          absl::StrCat("slot ", slot, " is at ", position, ", not at the capture's ", depth));
    }
    uint64_t tail_sum = 0;
    if (res.tail().rows() > 0) {
      ASSIGN_OR_RETURN(absl::Span<uint8_t> tail, Resolve(*s, res.tail().region()));
      const int64_t rows = res.tail().rows();
      if (static_cast<int64_t>(tail.size()) != rows * memory->layout().row_bytes()) {
        return absl::InvalidArgumentError("tail region does not match its rows");
      }
      size_t offset = 0;
      const StateLayout& layout = memory->layout();
      for (size_t c = 0; c < layout.components.size(); ++c) {
        if (layout.components[c].kind != ComponentKind::kRows) continue;
        const size_t n = static_cast<size_t>(rows * layout.components[c].bytes());
        RETURN_IF_ERROR(memory->CopyRowsOut(slot, static_cast<int>(c),
                                            static_cast<int64_t>(res.tail().first_row()), rows,
                                            tail.subspan(offset, n)));
        offset += n;
      }
      tail_sum = Xxh3(tail.data(), tail.size());
    }
    return std::make_pair(Xxh3(priv.data(), priv.size()), tail_sum);
  };
  absl::StatusOr<std::pair<uint64_t, uint64_t>> sums = copy();
  if (!sums.ok()) {
    v1::AbortCaptureRequest ar;
    ar.set_session_id(s->session_id);
    ar.set_reservation_id(res.reservation_id());
    ar.set_reason(std::string(sums.status().message()));
    v1::AbortCaptureResponse unused;
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->AbortCapture(ctx.get(), ar, &unused);
    if (!st.ok()) CAIRN_LOG(WARNING) << "aborting a capture: " << st.error_message();
    return sums.status();
  }
  v1::CommitCaptureRequest cr;
  cr.set_session_id(s->session_id);
  cr.set_reservation_id(res.reservation_id());
  cr.set_private_checksum(sums->first);
  cr.set_tail_checksum(sums->second);
  v1::CommitCaptureResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->CommitCapture(ctx.get(), cr, &resp);
  if (!st.ok()) return Lost(st, "commit capture");
  return absl::OkStatus();
}

void GrpcStateCache::SlotIdle(int slot) {
  v1::SessionClientMessage m;
  m.mutable_slot_idle()->set_slot(static_cast<uint32_t>(slot));
  WriteToStream(m);
}

void GrpcStateCache::SlotBusy(int slot) {
  v1::SessionClientMessage m;
  m.mutable_slot_busy()->set_slot(static_cast<uint32_t>(slot));
  WriteToStream(m);
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
