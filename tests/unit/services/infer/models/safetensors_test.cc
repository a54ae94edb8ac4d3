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

// Writes a safetensors file with the header text `header` as it is (no padding) and `data`.
std::string WriteRaw(const std::string& name, const std::string& header, const std::string& data) {
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

// The format forbids tensors sharing bytes: a file whose tensors overlap (or alias one
// another whole) is refused naming both, while gaps between tensors stay accepted.
TEST(SafetensorsTest, OverlappingTensorsAreRefusedNamingBoth) {
  const std::string data(16, '\0');
  const std::string overlap = WriteRaw("overlap",
                                       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                       data);
  const std::string alias = WriteRaw("alias",
                                     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                     R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}})",
                                     data);
  const std::string inside = WriteRaw("inside",
                                      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("b":{"dtype":"I8","shape":[1],"data_offsets":[15,16]},)"
                                      R"("c":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                      data);
  const std::string gaps = WriteRaw("gaps",
                                    R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                                    R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                                    data);

  for (const std::string& path : {overlap, alias, inside}) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
    EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << path;
    EXPECT_THAT(f.status().message(), HasSubstr("overlap")) << path;
    EXPECT_THAT(f.status().message(), HasSubstr("tensors a [")) << path;
  }
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(gaps);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);
}

// A writer that does not pad the header leaves tensors misaligned in the mapping: they are
// read from aligned copies holding the same bytes.
TEST(SafetensorsTest, MisalignedTensorsAreReadFromAlignedCopies) {
  const float f32[2] = {1.5f, -2.25f};
  const uint16_t bf16[2] = {FloatToBf16(3.0f), FloatToBf16(-0.5f)};
  std::string data = "x";  // One I8 byte first: the F32 tensor starts at data offset 1.
  data.append(reinterpret_cast<const char*>(f32), 8);
  data.append(reinterpret_cast<const char*>(bf16), 4);
  std::string header = R"({"i":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},)"
                       R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[9,13]}})";
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');  // Data at an aligned start.
  const std::string path = WriteRaw("misaligned", header, data);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);

  ASSERT_TRUE(file.ok()) << file.status();
  const TensorView& f = (*file)->tensors().at("f");
  const TensorView& h = (*file)->tensors().at("h");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data) % alignof(float), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data) % alignof(uint16_t), 0u);
  EXPECT_EQ(std::memcmp(f.data, f32, 8), 0);
  EXPECT_EQ(std::memcmp(h.data, bf16, 4), 0);
  EXPECT_EQ(reinterpret_cast<const float*>(f.data)[1], -2.25f);
  absl::StatusOr<std::vector<float>> wide = ReadAsF32(h, {2});
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(*wide, (std::vector<float>{3.0f, -0.5f}));
}

// A folder whose shards disagree with one another or with the index is refused naming what
// is wrong: a shard the index names but the folder lacks (an interrupted download), a tensor
// in two shards, a tensor the index places in a shard that does not hold it, and shard names
// that would leave the folder.
TEST(SafetensorsTest, AStoreRefusesShardsThatDisagreeNamingThem) {
  namespace fs = std::filesystem;
  const auto folder = [](const std::string& name) {
    const fs::path dir = TempPath(name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
  };
  const auto shard = [](const fs::path& path, const std::string& tensor) {
    const std::string header =
        "{\"" + tensor + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    std::ofstream out(path, std::ios::binary);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << std::string(4, '\0');
  };
  const auto index = [](const fs::path& dir, const std::string& weight_map) {
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": )" << weight_map << "}";
  };

  const fs::path missing = folder("missing-shard");
  shard(missing / "a.safetensors", "x");
  index(missing, R"({"x": "a.safetensors", "y": "b.safetensors"})");
  const fs::path twice = folder("twice");
  shard(twice / "a.safetensors", "x");
  shard(twice / "b.safetensors", "x");
  const fs::path twice_indexed = folder("twice-indexed");
  shard(twice_indexed / "a.safetensors", "x");
  shard(twice_indexed / "b.safetensors", "x");
  index(twice_indexed, R"({"x": "a.safetensors", "z": "b.safetensors"})");
  const fs::path misplaced = folder("misplaced");
  shard(misplaced / "a.safetensors", "x");
  shard(misplaced / "b.safetensors", "y");
  index(misplaced, R"({"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"})");
  const fs::path outside = folder("outside");
  index(outside, R"({"x": "../a.safetensors"})");

  absl::Status s = TensorStore::Open(missing.string()).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(s.message(), HasSubstr("b.safetensors"));
  for (const fs::path& dir : {twice, twice_indexed}) {
    s = TensorStore::Open(dir.string()).status();
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << dir;
    EXPECT_THAT(s.message(), HasSubstr("tensor x is in both a.safetensors and b.safetensors"));
  }
  s = TensorStore::Open(misplaced.string()).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("not there"));
  s = TensorStore::Open(outside.string()).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("bad shard name for x"));
}

}  // namespace
}  // namespace cairn::infer
