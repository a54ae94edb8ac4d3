// GrpcStateCache's session with the cache daemon: construction and shutdown, the session stream
// (hello, welcome, the arena mapped and pinned, the model registered, then the server's messages
// until the stream ends), reconnecting with backoff, heartbeats, writes to the stream, and
// resolving arena handles. The StateCache calls are in grpc_state_cache_calls.cc, the spills in
// grpc_state_cache_spills.cc, the restores in grpc_state_cache_restore.cc.

#include "services/infer/cache_client/grpc_state_cache.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc/client.h"
#include "common/log/log.h"
#include "common/status/grpc_status.h"
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

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  watchdog_thread_ = std::thread([this] { WatchdogLoop(); });
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
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
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
      done_order_.clear();
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
    // Cancelled before write_mu_ is taken: a write blocked on flow control holds it, and only
    // the cancel ends that write.
    ctx->TryCancel();
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

void GrpcStateCache::WatchdogLoop() {
  const absl::Duration period =
      std::clamp(options_.stream_write_timeout / 4, absl::Milliseconds(1), absl::Seconds(1));
  std::shared_ptr<grpc::ClientContext> cancelled;  // Once per stream (kept: no address reuse).
  MutexLock lock(&mu_);
  while (!stopping_) {
    cv_.WaitWithTimeout(&mu_, period);
    if (stopping_) break;
    const int64_t started = write_started_ns_.load();
    if (started == 0 || stream_context_ == nullptr || stream_context_ == cancelled) continue;
    const absl::Duration outstanding = absl::Nanoseconds(MonotonicNanos() - started);
    if (outstanding < options_.stream_write_timeout) continue;
    // From here no call uses the session (Current() refuses); the session thread reconnects.
    std::shared_ptr<grpc::ClientContext> ctx = stream_context_;
    cancelled = ctx;
    connected_.store(false);
    cv_.SignalAll();
    mu_.Unlock();
    CAIRN_LOG(WARNING) << "ending the cache session: a write to its stream has been outstanding "
                          "for "
                       << outstanding << " (the cache daemon is not reading it; "
                       << "stream_write_timeout " << options_.stream_write_timeout << ")";
    ctx->TryCancel();
    mu_.Lock();
  }
}

bool GrpcStateCache::WriteToStream(const v1::SessionClientMessage& m, const Session* session) {
  MutexLock lock(&write_mu_);
  if (stream_ == nullptr || (session != nullptr && session != stream_session_)) return false;
  write_started_ns_.store(MonotonicNanos());
  const bool written = stream_->Write(m);
  write_started_ns_.store(0);
  return written;
}

void GrpcStateCache::OnServerMessage(const v1::SessionServerMessage& m) {
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (m.has_spill_request()) {
      spills_.push_back(m.spill_request());
      wake = true;
    } else if (m.has_lease_ready()) {
      // With no restore running, no one waits for it (its lease was released). The scheduler
      // reads it at its next poll (PollRestore), which it may be idle waiting for.
      if (restores_running_ > 0) {
        lease_ready_[m.lease_ready().lease_id()] = m.lease_ready();
        wake = true;
      }
    } else if (m.has_drop_frontier()) {
      CAIRN_LOG(INFO) << "cache dropped the frontier of slot " << m.drop_frontier().slot() << ": "
                      << m.drop_frontier().reason();
    }
    cv_.SignalAll();
  }
  if (wake && wake_) wake_();
}

size_t GrpcStateCache::LeaseAnswersForTest() const {
  MutexLock lock(&mu_);
  return lease_ready_.size();
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

absl::Status GrpcStateCache::LostSession(const std::shared_ptr<Session>& session,
                                         const grpc::Status& status, const char* what) {
  absl::Status lost = Lost(status, what);
  return absl::IsUnavailable(lost) ? EndSession(session, lost) : lost;
}

absl::Status GrpcStateCache::EndSession(const std::shared_ptr<Session>& session,
                                        const absl::Status& why) {
  std::shared_ptr<grpc::ClientContext> ctx;
  {
    MutexLock lock(&mu_);
    if (session_ == session) {
      // From here no call uses the session and no spill of it is done (Current() refuses).
      connected_.store(false);
      ctx = stream_context_;
      cv_.SignalAll();
    }
  }
  if (ctx != nullptr) {
    CAIRN_LOG(WARNING) << "ending cache session " << session->session_id
                       << " so that the cache forgets the rows it borrowed from a slot that is "
                          "overwritten without its leave: "
                       << why;
    ctx->TryCancel();
  }
  return absl::UnavailableError(absl::StrCat(why.message(), " (the cache session was ended)"));
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

}  // namespace cairn::infer
