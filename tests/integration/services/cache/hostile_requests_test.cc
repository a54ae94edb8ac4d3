// Requests a careless or hostile client might send, through gRPC: each gets a specific error
// naming what is wrong, or (for retries) exactly one effect. Never a crash.

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/grpc/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/services/cache/fake_infer.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::Server;
using testing::Tokens;

// The layout FakeInfer registers, under `digest`.
v1::RegisterModelRequest Registration(const FakeInfer& infer, const std::string& digest) {
  v1::RegisterModelRequest reg;
  reg.set_session_id(infer.session());
  reg.mutable_identity()->set_digest(digest);
  reg.mutable_layout()->set_chunk_rows(testing::kChunkRows);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::StateComponent* c = reg.mutable_layout()->add_components();
    c->set_id(i);
    c->set_kind(v1::COMPONENT_KIND_ROWS);
    c->set_bytes_per_row(testing::kRowBytes);
  }
  return reg;
}

class HostileRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(infer_.Open()); }

  // Expects `status` to be `code` with a message containing `field`.
  static void ExpectError(const grpc::Status& status, grpc::StatusCode code,
                          const std::string& field) {
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), field))
        << "\"" << status.error_message() << "\" does not name " << field;
  }

  grpc::Status Register(const v1::RegisterModelRequest& req) {
    v1::RegisterModelResponse resp;
    return infer_.Call(&v1::CacheService::Stub::RegisterModel, req, &resp);
  }

  v1::ReserveCaptureRequest Reserve(uint32_t slot, uint64_t depth) {
    v1::ReserveCaptureRequest r;
    r.set_session_id(infer_.session());
    r.set_model_id(infer_.model());
    r.set_slot(slot);
    r.set_depth(depth);
    r.set_kind(v1::CAPTURE_KIND_END);
    return r;
  }

  Server server_;
  FakeInfer infer_{server_.address()};
};

TEST_F(HostileRequestsTest, ALayoutWhoseSizesOverflowIsRefusedNamingTheField) {
  v1::RegisterModelRequest reg = Registration(infer_, "huge");
  reg.mutable_layout()->set_chunk_rows(0xFFFFFFFFu);
  for (auto& c : *reg.mutable_layout()->mutable_components())
    c.set_bytes_per_row(uint64_t{1} << 40);

  ExpectError(Register(reg), grpc::StatusCode::INVALID_ARGUMENT, "chunk_rows");
}

TEST_F(HostileRequestsTest, EmptyLayoutSizesAreRefusedNamingTheField) {
  v1::RegisterModelRequest no_chunk = Registration(infer_, "a");
  no_chunk.mutable_layout()->set_chunk_rows(0);
  v1::RegisterModelRequest no_row = Registration(infer_, "b");
  no_row.mutable_layout()->mutable_components(1)->set_bytes_per_row(0);
  v1::RegisterModelRequest no_private = Registration(infer_, "c");
  v1::StateComponent* p = no_private.mutable_layout()->add_components();
  p->set_id(2);
  p->set_kind(v1::COMPONENT_KIND_PRIVATE);

  ExpectError(Register(no_chunk), grpc::StatusCode::INVALID_ARGUMENT, "layout.chunk_rows");
  ExpectError(Register(no_row), grpc::StatusCode::INVALID_ARGUMENT,
              "layout.components[1].bytes_per_row");
  ExpectError(Register(no_private), grpc::StatusCode::INVALID_ARGUMENT,
              "layout.components[2].private_bytes");
}

TEST_F(HostileRequestsTest, ASlotOnlyTakesRequestsForTheModelItRuns) {
  v1::RegisterModelResponse other;
  ASSERT_TRUE(infer_
                  .Call(&v1::CacheService::Stub::RegisterModel,
                        Registration(infer_, "test-model-v2"), &other)
                  .ok());
  infer_.PrefillCold(0, Tokens(1, 20), {}, 1);
  v1::UpdateFrontierRequest up;
  up.set_session_id(infer_.session());
  up.set_model_id(other.model_id());
  up.set_slot(0);
  up.set_expected_depth(20);
  up.add_append_tokens(5);
  v1::UpdateFrontierResponse updated;
  v1::ReserveCaptureRequest reserve = Reserve(0, 20);
  reserve.set_model_id(other.model_id());
  v1::CaptureReservation reservation;

  ExpectError(infer_.Call(&v1::CacheService::Stub::UpdateFrontier, up, &updated),
              grpc::StatusCode::FAILED_PRECONDITION, "model");
  ExpectError(infer_.Call(&v1::CacheService::Stub::ReserveCapture, reserve, &reservation),
              grpc::StatusCode::FAILED_PRECONDITION, "model");
}

TEST_F(HostileRequestsTest, ARetryWithTheSameClientRequestIdHasOneEffect) {
  std::vector<uint64_t> ids = infer_.PrefillCold(0, Tokens(2, 40), {40}, 2);
  infer_.PrefillCold(1, Tokens(3, 20), {}, 3);
  v1::UpdateFrontierRequest up;
  up.set_session_id(infer_.session());
  up.set_model_id(infer_.model());
  up.set_slot(1);
  up.set_expected_depth(20);
  up.add_append_tokens(7);
  up.set_client_request_id(100);
  v1::ReserveCaptureRequest reserve = Reserve(1, 21);
  reserve.set_client_request_id(101);
  v1::AcquireRestoreRequest restore;
  restore.set_session_id(infer_.session());
  restore.set_model_id(infer_.model());
  restore.set_checkpoint_id(ids[0]);
  restore.set_slot(0);
  restore.set_client_request_id(102);
  v1::UpdateFrontierResponse up1, up2;
  v1::CaptureReservation r1, r2;
  v1::RestoreLease l1, l2;

  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::UpdateFrontier, up, &up1).ok());
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::UpdateFrontier, up, &up2).ok());
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::ReserveCapture, reserve, &r1).ok());
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::ReserveCapture, reserve, &r2).ok());
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::AcquireRestore, restore, &l1).ok());
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::AcquireRestore, restore, &l2).ok());

  EXPECT_EQ(up1.depth(), 21u);
  EXPECT_EQ(up2.depth(), 21u);  // Appended once.
  EXPECT_EQ(r1.reservation_id(), r2.reservation_id());
  EXPECT_EQ(l1.lease_id(), l2.lease_id());
  // The id names one request: reused for another call it is refused.
  v1::ReserveCaptureRequest reused = Reserve(0, 40);
  reused.set_client_request_id(100);
  v1::CaptureReservation r3;
  ExpectError(infer_.Call(&v1::CacheService::Stub::ReserveCapture, reused, &r3),
              grpc::StatusCode::INVALID_ARGUMENT, "client_request_id");
}

TEST_F(HostileRequestsTest, StringsAndListsAreBounded) {
  const std::string huge(1 << 20, 'x');
  v1::LookupRequest lookup;
  lookup.set_session_id(infer_.session());
  lookup.set_model_id(infer_.model());
  lookup.add_tokens(1);
  lookup.set_conversation(huge);
  v1::LookupResponse found;
  v1::StartSlotRequest start;
  start.set_session_id(infer_.session());
  start.set_model_id(infer_.model());
  start.set_mode(v1::StartSlotRequest::MODE_COLD);
  for (int i = 0; i < 2000; ++i) start.mutable_input_identity()->add_media()->set_position(i);
  v1::StartSlotResponse started;
  v1::ReleaseLeaseRequest release;
  release.set_session_id(infer_.session());
  release.set_lease_id(1);
  release.set_failure(huge);
  v1::ReleaseLeaseResponse released;
  v1::RegisterModelRequest named = Registration(infer_, "named");
  named.set_model_name(huge);

  ExpectError(infer_.Call(&v1::CacheService::Stub::Lookup, lookup, &found),
              grpc::StatusCode::INVALID_ARGUMENT, "conversation");
  ExpectError(infer_.Call(&v1::CacheService::Stub::StartSlot, start, &started),
              grpc::StatusCode::INVALID_ARGUMENT, "input_identity.media");
  ExpectError(infer_.Call(&v1::CacheService::Stub::ReleaseLease, release, &released),
              grpc::StatusCode::INVALID_ARGUMENT, "failure");
  ExpectError(Register(named), grpc::StatusCode::INVALID_ARGUMENT, "model_name");
}

TEST_F(HostileRequestsTest, ASlotHoldsOneReservationAndOneLease) {
  std::vector<uint64_t> ids = infer_.PrefillCold(0, Tokens(4, 40), {40}, 4);
  infer_.PrefillCold(1, Tokens(5, 20), {}, 5);
  v1::CaptureReservation first, second;
  ASSERT_TRUE(infer_.Call(&v1::CacheService::Stub::ReserveCapture, Reserve(1, 20), &first).ok());
  v1::RestoreLease lease, again;
  ASSERT_TRUE(infer_.AcquireRestore(0, ids[0], &lease).ok());

  ExpectError(infer_.Call(&v1::CacheService::Stub::ReserveCapture, Reserve(1, 20), &second),
              grpc::StatusCode::FAILED_PRECONDITION, "reservation");
  ExpectError(infer_.AcquireRestore(0, ids[0], &again), grpc::StatusCode::FAILED_PRECONDITION,
              "lease");
}

TEST_F(HostileRequestsTest, StartSlotHonoursTheSlotCountFromHello) {
  v1::StartSlotRequest start;
  start.set_session_id(infer_.session());
  start.set_model_id(infer_.model());
  start.set_slot(2);  // FakeInfer says hello with 2 slots.
  start.set_mode(v1::StartSlotRequest::MODE_COLD);
  v1::StartSlotResponse started;

  ExpectError(infer_.Call(&v1::CacheService::Stub::StartSlot, start, &started),
              grpc::StatusCode::INVALID_ARGUMENT, "slot 2");
}

TEST_F(HostileRequestsTest, ARequestThatDoesNotParseIsInvalidArgument) {
  grpc::GenericStub stub(NewLocalChannel(server_.address()));
  const std::string garbage = "\xff\xff\xff\xff";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  auto ctx = NewClientContext(absl::Seconds(10));
  std::promise<grpc::Status> done;

  stub.UnaryCall(ctx.get(), "/cairn.cache.v1.CacheService/Lookup", grpc::StubOptions(), &request,
                 &response, [&done](grpc::Status s) { done.set_value(s); });

  std::future<grpc::Status> status = done.get_future();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ExpectError(status.get(), grpc::StatusCode::INVALID_ARGUMENT, "cairn.cache.v1.LookupRequest");
}

}  // namespace
}  // namespace cairn::cache
