#include "common/checksum/checksum.h"

#include <string>

#include "gtest/gtest.h"

namespace cairn {
namespace {

TEST(Xxh3Test, StreamingMatchesOneShot) {
  std::string data(10000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131);
  Xxh3Stream stream(7);

  stream.Update(data.substr(0, 1));
  stream.Update(data.substr(1, 4095));
  stream.Update(data.substr(4096));

  EXPECT_EQ(stream.Digest(), Xxh3(data, 7));
}

TEST(Xxh3Test, SeedAndOneBitChangeTheDigest) {
  std::string data = "chunk payload";
  std::string flipped = data;
  flipped[3] ^= 1;

  EXPECT_NE(Xxh3(data, 0), Xxh3(data, 1));
  EXPECT_NE(Xxh3(data), Xxh3(flipped));
}

TEST(Xxh3Test, KnownValueOfTheEmptyInput) {
  // XXH3_64bits("") with seed 0, from the xxHash reference.
  EXPECT_EQ(Xxh3("", 0), 0x2D06800538D394C2ull);
}

TEST(Xxh3Test, UpdateU64IsLittleEndian) {
  Xxh3Stream a;
  a.UpdateU64(0x0102030405060708ull);
  const unsigned char bytes[] = {8, 7, 6, 5, 4, 3, 2, 1};

  EXPECT_EQ(a.Digest(), Xxh3(bytes, sizeof(bytes)));
}

}  // namespace
}  // namespace cairn
