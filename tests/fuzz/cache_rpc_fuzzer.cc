// Requests to the cache daemon's handlers (proto/cairn/cache/v1/cache.proto), in process: each
// input is a sequence of calls whose bytes are parsed as the method's request message, as the
// gRPC adapter does with a raw request, and handed to CacheDaemon. A fresh daemon per input
// has one open session (a liveness sink that drops what it is sent) and one registered model,
// and each call may have its session and model ids pointed at them so that the fuzzer reaches
// past the id checks. Every arena handle the daemon hands out must lie inside its arena.
// Input: up to 24 calls, each {method byte, flags byte, u16 length, request bytes}; flags bit 0
// sets session_id, bit 1 sets model_id, bit 2 lets a lease period pass while the session
// heartbeats (leases and reservations expire), bit 3 fills in what a well-behaved client would
// know: the last reservation and lease ids and the checksums of the bytes in the reserved
// regions, bit 4 lets a session timeout pass in silence (the session dies).

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "cairn/cache/v1/cache.pb.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/shm/arena_handle.h"
#include "common/status/check.h"
#include "common/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/cache_rpc.h"
#include "services/cache/proto_convert.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

namespace cairn::cache {
namespace {

constexpr int kMaxCalls = 24;
constexpr uint32_t kChunkRows = 16;
constexpr uint64_t kRowBytes = 64;
constexpr uint64_t kPrivateBytes = 512;

class DropSink final : public SessionSink {
 public:
  void Send(v1::SessionServerMessage message) override { message.ByteSizeLong(); }
};

// Points the uint64 field `name` of `m`, if it has one, at `value`.
void SetId(google::protobuf::Message* m, const char* name, uint64_t value) {
  const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
  if (f != nullptr && f->type() == google::protobuf::FieldDescriptor::TYPE_UINT64 &&
      !f->is_repeated()) {
    m->GetReflection()->SetUInt64(m, f, value);
  }
}

struct Context {
  CacheDaemon* daemon;
  uint64_t session;
  uint64_t model;
  v1::CaptureReservation last_reservation;
  uint64_t last_lease = 0;
};

// Reliability plan C3: a handle the daemon hands out names live bytes of its own arena.
void CheckHandle(const Context& c, const v1::ArenaHandle& h) {
  if (h.length() == 0) return;  // An absent region (no tail).
  CAIRN_CHECK(c.daemon->arena().Resolve(ArenaHandle{h.incarnation(), h.offset(), h.length()}).ok());
}
void Remember(Context& c, const v1::RestoreLease& lease) {
  for (const v1::ChunkRegion& chunk : lease.chunks()) CheckHandle(c, chunk.region());
  CheckHandle(c, lease.private_state().region());
  CheckHandle(c, lease.tail().region());
  c.last_lease = lease.lease_id();
}
void Remember(Context& c, const v1::CaptureReservation& reservation) {
  CheckHandle(c, reservation.private_state().region());
  CheckHandle(c, reservation.tail().region());
  c.last_reservation = reservation;
}
void Remember(Context&, const google::protobuf::Message&) {}

// The checksum of the bytes `h` names, or 0 when its region is gone (released or expired
// since it was handed out: the daemon then refuses the commit).
uint64_t ChecksumOf(const Context& c, const v1::ArenaHandle& h) {
  if (h.length() == 0) return 0;
  absl::StatusOr<absl::Span<uint8_t>> bytes =
      c.daemon->arena().Resolve(ArenaHandle{h.incarnation(), h.offset(), h.length()});
  return bytes.ok() ? Xxh3(bytes->data(), bytes->size()) : 0;
}

// What a well-behaved client fills in (flags bit 3).
void FillIn(const Context& c, v1::CommitCaptureRequest* req) {
  req->set_reservation_id(c.last_reservation.reservation_id());
  req->set_private_checksum(ChecksumOf(c, c.last_reservation.private_state().region()));
  req->set_tail_checksum(ChecksumOf(c, c.last_reservation.tail().region()));
}
void FillIn(const Context& c, v1::AbortCaptureRequest* req) {
  req->set_reservation_id(c.last_reservation.reservation_id());
}
void FillIn(const Context& c, v1::ReleaseLeaseRequest* req) { req->set_lease_id(c.last_lease); }
void FillIn(const Context&, google::protobuf::Message*) {}

// Parses `bytes` as Req, points its ids per `flags` and calls `method` (a cache_rpc.h adapter:
// it takes the daemon first).
template <typename Req, typename Resp, typename Method>
void CallWith(Context& c, uint8_t flags, absl::string_view bytes, Method method) {
  Req req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (flags & 1) SetId(&req, "session_id", c.session);
  if (flags & 2) SetId(&req, "model_id", c.model);
  if (flags & 8) FillIn(c, &req);
  Resp resp;
  absl::Status s = std::invoke(method, *c.daemon, req, &resp);
  if (!s.ok()) return;
  resp.ByteSizeLong();
  Remember(c, resp);
}

template <typename Req, typename Resp>
void Call(Context& c, uint8_t flags, absl::string_view bytes,
          absl::Status (*method)(CacheDaemon&, const Req&, Resp*)) {
  CallWith<Req, Resp>(c, flags, bytes, method);
}

v1::RegisterModelRequest Registration(uint64_t session) {
  v1::RegisterModelRequest reg;
  reg.set_session_id(session);
  reg.mutable_identity()->set_digest("fuzz-model");
  reg.mutable_layout()->set_chunk_rows(kChunkRows);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::StateComponent* c = reg.mutable_layout()->add_components();
    c->set_id(i);
    c->set_kind(v1::COMPONENT_KIND_ROWS);
    c->set_bytes_per_row(kRowBytes);
  }
  v1::StateComponent* p = reg.mutable_layout()->add_components();
  p->set_id(2);
  p->set_kind(v1::COMPONENT_KIND_PRIVATE);
  p->set_private_bytes(kPrivateBytes);
  return reg;
}

void Run(fuzz::FuzzInput& in) {
  SetMinLogLevel(LogLevel::kError);          // Sessions opening and closing are routine here.
  google::protobuf::SetLogHandler(nullptr);  // Invalid UTF-8 in strings is routine here.
  FakeClock clock;
  CacheDaemonOptions options;
  options.cache.ram_bytes = 4 << 20;
  options.arena.size_bytes = 8 << 20;
  options.arena.first_pin_bytes = 1 << 20;
  options.arena.pin_step_bytes = 1 << 20;
  options.event_history = 64;
  options.cache.event_ring_capacity = 64;
  absl::StatusOr<std::unique_ptr<CacheDaemon>> daemon = CacheDaemon::Create(options, &clock);
  CAIRN_CHECK(daemon.ok());
  DropSink sink;
  v1::Hello hello;
  hello.set_instance_name("fuzz");
  hello.set_client_incarnation(1);
  hello.set_slots(2);
  absl::StatusOr<SessionHello> checked = HelloFromProto(hello);
  CAIRN_CHECK(checked.ok());
  absl::StatusOr<SessionWelcome> welcome = (*daemon)->OpenSession(*checked, &sink);
  CAIRN_CHECK(welcome.ok());
  v1::RegisterModelResponse registered;
  CAIRN_CHECK(rpc::RegisterModel(**daemon, Registration(welcome->session_id), &registered).ok());
  Context c{daemon->get(), welcome->session_id, registered.model_id(), {}, 0};

  for (int i = 0; i < kMaxCalls && !in.empty(); ++i) {
    const uint8_t method = in.Byte();
    const uint8_t flags = in.Byte();
    const absl::string_view bytes = in.Piece();
    switch (method % 17) {
      case 0:
        Call(c, flags, bytes, &rpc::RegisterModel);
        break;
      case 1:
        Call(c, flags, bytes, &rpc::Lookup);
        break;
      case 2:
        Call(c, flags, bytes, &rpc::StartSlot);
        break;
      case 3:
        Call(c, flags, bytes, &rpc::AcquireRestore);
        break;
      case 4:
        Call(c, flags, bytes, &rpc::ReleaseLease);
        break;
      case 5:
        Call(c, flags, bytes, &rpc::ReserveCapture);
        break;
      case 6:
        Call(c, flags, bytes, &rpc::CommitCapture);
        break;
      case 7:
        Call(c, flags, bytes, &rpc::AbortCapture);
        break;
      case 8:
        Call(c, flags, bytes, &rpc::UpdateFrontier);
        break;
      case 9:
        Call(c, flags, bytes, &rpc::GetStatus);
        break;
      case 10:
        Call(c, flags, bytes, &rpc::ListCheckpoints);
        break;
      case 11:
        Call(c, flags, bytes, &rpc::GetTree);
        break;
      case 12:
        Call(c, flags, bytes, &rpc::Explain);
        break;
      case 13:
        Call(c, flags, bytes, &rpc::Evict);
        break;
      case 14: {
        // A flush that may or may not finish at once; a waiting one is cancelled (the caller
        // went away) or left to the ticks below.
        const uint64_t id =
            c.daemon->StartFlush(absl::Milliseconds(flags & 0xff), [](absl::Status, uint64_t) {});
        if (flags & 2) c.daemon->CancelFlush(id);
        break;
      }
      case 15: {
        v1::SessionClientMessage m;
        if (m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          HandleSessionMessage(*c.daemon, (flags & 1) ? c.session : uint64_t{flags}, m)
              .IgnoreError();
        }
        break;
      }
      default:
        c.daemon->CloseSession((flags & 1) ? c.session : flags, "fuzz");
        break;
    }
    if (flags & 4) {
      const absl::Duration step = options.session_timeout / 2;
      for (absl::Duration passed; passed <= options.default_lease; passed += step) {
        clock.Advance(step);
        c.daemon->Touch(c.session).IgnoreError();  // The session may be gone already.
        c.daemon->Tick();
      }
    }
    if (flags & 16) {
      clock.Advance(options.session_timeout + absl::Seconds(1));
      c.daemon->Tick();
    }
  }
  c.daemon->CloseSession(c.session, "fuzz input done");
}

}  // namespace
}  // namespace cairn::cache

CAIRN_FUZZ_TARGET(CacheRpc) {
  cairn::fuzz::FuzzInput in(data, size);
  cairn::cache::Run(in);
  return 0;
}
