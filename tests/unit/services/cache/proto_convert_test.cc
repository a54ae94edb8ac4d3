#include "services/cache/proto_convert.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

v1::ModelLayout TwoComponents() {
  v1::ModelLayout layout;
  layout.set_chunk_rows(16);
  v1::StateComponent* rows = layout.add_components();
  rows->set_id(0);
  rows->set_kind(v1::COMPONENT_KIND_ROWS);
  rows->set_bytes_per_row(64);
  v1::StateComponent* priv = layout.add_components();
  priv->set_id(1);
  priv->set_kind(v1::COMPONENT_KIND_PRIVATE);
  priv->set_private_bytes(4096);
  return layout;
}

// Expects InvalidArgument whose message names `field`.
void ExpectNamed(const absl::Status& s, const std::string& field) {
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(absl::StrContains(s.message(), field)) << s.message() << " lacks " << field;
}

TEST(ProtoConvertTest, AValidLayoutConverts) {
  absl::StatusOr<ModelLayout> layout = LayoutFromProto(TwoComponents());

  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->chunk_rows, 16);
  EXPECT_EQ(layout->RowBytes(), 64);
  EXPECT_EQ(layout->PrivateBytes(), 4096);
}

TEST(ProtoConvertTest, BadLayoutsNameTheField) {
  v1::ModelLayout no_chunk = TwoComponents();
  no_chunk.set_chunk_rows(0);
  v1::ModelLayout zero_row = TwoComponents();
  zero_row.mutable_components(0)->set_bytes_per_row(0);
  v1::ModelLayout zero_private = TwoComponents();
  zero_private.mutable_components(1)->set_private_bytes(0);
  v1::ModelLayout out_of_order = TwoComponents();
  out_of_order.mutable_components(1)->set_id(5);
  v1::ModelLayout no_kind = TwoComponents();
  no_kind.mutable_components(1)->set_kind(v1::COMPONENT_KIND_UNSPECIFIED);
  v1::ModelLayout overflow = TwoComponents();
  overflow.set_chunk_rows(0xFFFFFFFFu);
  overflow.mutable_components(0)->set_bytes_per_row(uint64_t{1} << 40);

  ExpectNamed(LayoutFromProto(no_chunk).status(), "layout.chunk_rows");
  ExpectNamed(LayoutFromProto(zero_row).status(), "layout.components[0].bytes_per_row");
  ExpectNamed(LayoutFromProto(zero_private).status(), "layout.components[1].private_bytes");
  ExpectNamed(LayoutFromProto(out_of_order).status(), "layout.components[1].id");
  ExpectNamed(LayoutFromProto(no_kind).status(), "layout.components[1].kind");
  ExpectNamed(LayoutFromProto(overflow).status(), "chunk_rows");
}

TEST(ProtoConvertTest, StringsListsTokensAndSlotsAreBounded) {
  v1::InputIdentity media;
  for (int i = 0; i <= WireLimits::kMaxMedia; ++i) media.add_media()->set_position(i);
  v1::InputIdentity long_digest;
  long_digest.add_media()->set_digest(std::string(WireLimits::kMaxNameBytes + 1, 'd'));
  google::protobuf::RepeatedField<uint32_t> bad_token;
  bad_token.Add(0xFFFFFFFFu);

  ExpectNamed(CheckLength("conversation", std::string(257, 'c'), 256), "conversation");
  ExpectNamed(InputDigest("input_identity", media).status(), "input_identity.media");
  ExpectNamed(InputDigest("input_identity", long_digest).status(),
              "input_identity.media[0].digest");
  ExpectNamed(TokensFromProto("tokens", bad_token).status(), "tokens");
  EXPECT_THAT(SlotFromProto(2, 2).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*SlotFromProto(1, 2), 1);
  EXPECT_EQ(*SlotFromProto(100, 0), 100);  // No declared count: the protocol cap applies.
  EXPECT_TRUE(CheckLength("conversation", std::string(256, 'c'), 256).ok());
}

TEST(ProtoConvertTest, CaptureKindsRoundTrip) {
  for (v1::CaptureKind k : {v1::CAPTURE_KIND_END, v1::CAPTURE_KIND_REUSED, v1::CAPTURE_KIND_STABLE,
                            v1::CAPTURE_KIND_GRID, v1::CAPTURE_KIND_LEARNED}) {
    absl::StatusOr<CaptureKind> ours = FromProtoKind(k);
    ASSERT_TRUE(ours.ok());
    EXPECT_EQ(ToProtoKind(*ours), k);
  }
  EXPECT_THAT(FromProtoKind(v1::CAPTURE_KIND_UNSPECIFIED).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::cache
