#include "services/infer/models/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("st-" + std::to_string(getpid()) + "-" + name))
      .string();
}

// Writes a safetensors file with one tensor "t" of the given dtype, shape and raw bytes.
std::string WriteOne(const std::string& name, const std::string& dtype, const std::string& shape,
                     const std::string& data, size_t declared_bytes) {
  std::string header = "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
                       ",\"data_offsets\":[0," + std::to_string(declared_bytes) + "]}}";
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
  return path;
}

TEST(SafetensorsTest, AStoreOfViewsFindsThemAndRefusesDuplicatesAndWrongSizes) {
  const std::vector<uint16_t> bits = {0x3f80, 0x4000, 0x4040, 0x4080};  // 1, 2, 3, 4 in bf16.
  TensorView v;
  v.name = "w";
  v.dtype = DType::kBF16;
  v.shape = {2, 2};
  v.data = reinterpret_cast<const uint8_t*>(bits.data());
  v.bytes = 8;

  absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::FromViews({v});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_NE((*store)->Find("w"), nullptr);
  absl::StatusOr<std::vector<float>> values = ReadAsF32(*(*store)->Find("w"), {2, 2});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4}));
  const absl::Status twice = TensorStore::FromViews({v, v}).status();
  EXPECT_THAT(twice, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(twice.message(), HasSubstr("given twice"));
  v.bytes = 6;
  const absl::Status short_view = TensorStore::FromViews({v}).status();
  EXPECT_THAT(short_view, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(short_view.message(), HasSubstr("bytes"));
}

TEST(SafetensorsTest, ReadsF16AndF32AsFloat) {
  const uint16_t half[2] = {0x3c00, 0xc000};  // 1.0, -2.0
  const float full[2] = {0.5f, -3.25f};
  const std::string f16 =
      WriteOne("f16", "F16", "[2]", std::string(reinterpret_cast<const char*>(half), 4), 4);
  const std::string f32 =
      WriteOne("f32", "F32", "[2]", std::string(reinterpret_cast<const char*>(full), 8), 8);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> a = SafetensorsFile::Open(f16);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> b = SafetensorsFile::Open(f32);

  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::vector<float>> va = ReadAsF32((*a)->tensors().at("t"), {2});
  absl::StatusOr<std::vector<float>> vb = ReadAsF32((*b)->tensors().at("t"), {2});
  ASSERT_TRUE(va.ok() && vb.ok());
  EXPECT_EQ(*va, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(*vb, (std::vector<float>{0.5f, -3.25f}));
}

// A file may hold tensors of dtypes Cairn does not compute with (buffers, parts it does not
// load): the file opens, and reading such a tensor names it, its file and its dtype.
TEST(SafetensorsTest, AnUnsupportedDtypeIsRefusedWhenReadNamingTensorFileAndDtype) {
  const std::string path = WriteOne("i8", "I8", "[2]", "ab", 2);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView& t = (*f)->tensors().at("t");
  absl::StatusOr<std::vector<float>> read = ReadAsF32(t, {2});

  EXPECT_EQ(t.dtype, DType::kOther);
  EXPECT_THAT(read.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(read.status().message(), HasSubstr("tensor t"));
  EXPECT_THAT(read.status().message(), HasSubstr("-i8 has dtype"));
  EXPECT_THAT(read.status().message(), HasSubstr("I8"));
}

// Their sizes are still checked where the format says an element's bytes; a dtype newer than
// that list is listed unchecked (it is never read).
TEST(SafetensorsTest, AnUnsupportedDtypesBytesAreCheckedWhereKnown) {
  const std::string i64 = WriteOne("i64", "I64", "[2]", std::string(12, '\0'), 12);
  const std::string newer = WriteOne("f4", "F4", "[3]", std::string(2, '\0'), 2);

  EXPECT_THAT(SafetensorsFile::Open(i64).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(SafetensorsFile::Open(newer).ok());
}

TEST(SafetensorsTest, DataPastTheEndIsATruncatedFile) {
  const std::string path = WriteOne("short", "F32", "[4]", std::string(8, '\0'), 16);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);

  EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(f.status().message(), HasSubstr("st-"));
}

TEST(SafetensorsTest, OffsetsDisagreeingWithShapeAreRejected) {
  const std::string path = WriteOne("shape", "F32", "[3]", std::string(8, '\0'), 8);

  EXPECT_THAT(SafetensorsFile::Open(path).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Found by the safetensors fuzz target (tests/fuzz/regressions/safetensors/).
TEST(SafetensorsTest, AShapeWhoseElementCountOverflowsIsRefusedNamingTheShape) {
  const std::string path = WriteOne("overflow", "F32", "[4294967296,4294967296]", "", 0);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);

  EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.status().message(), HasSubstr("too many elements"));
}

// Found by the safetensors fuzz target: an empty tensor has no data to copy.
TEST(SafetensorsTest, AnEmptyTensorReadsAsNoFloats) {
  const std::string path = WriteOne("empty", "F32", "[0,5]", "", 0);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);

  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::vector<float>> v = ReadAsF32((*f)->tensors().at("t"), {0, 5});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->empty());
}

TEST(SafetensorsTest, GarbageHeaderIsRejected) {
  const std::string path = TempPath("garbage");
  const std::string bytes("\x05\0\0\0\0\0\0\0{{{{{", 13);
  std::ofstream(path, std::ios::binary) << bytes;

  EXPECT_THAT(SafetensorsFile::Open(path).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SafetensorsTest, ShapeMismatchNamesTensorAndShapes) {
  const float full[2] = {0.5f, -3.25f};
  const std::string path =
      WriteOne("mismatch", "F32", "[2]", std::string(reinterpret_cast<const char*>(full), 8), 8);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();

  absl::StatusOr<std::vector<float>> v = ReadAsF32((*f)->tensors().at("t"), {1, 2});

  EXPECT_THAT(v.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(v.status().message(), HasSubstr("tensor t"));
  EXPECT_THAT(v.status().message(), HasSubstr("[1, 2]"));
}

TEST(SafetensorsTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is halfway between two bf16 values; ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256.0f), 0x3f80);
}

}  // namespace
}  // namespace cairn::infer
