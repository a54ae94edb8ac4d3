#include "common/grpc/peer_address.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cairn {
namespace {

TEST(ValidatePeerAddressTest, AcceptsTheDocumentedSpellings) {
  const std::vector<std::string> documented = {
      "unix:/run/cairn/cache.sock",            // deploy/config, docs/gateway.md
      "unix:/run/cairn/infer.sock",            // deploy/config, docs/gateway.md
      "unix:/run/user/1000/cairn/cache.sock",  // docs/inference-daemon.md, tools/serve
      "unix:/tmp/cairn-1000/infer.sock",       // cairnctl's last default
      "127.0.0.1:8080",                        // docs/gateway.md, integration tests
      "localhost:50051",
  };
  for (const std::string& target : documented) {
    absl::Status s = ValidatePeerAddress(target);

    EXPECT_TRUE(s.ok()) << target << ": " << s;
  }
}

TEST(ValidatePeerAddressTest, AcceptsEveryFormGrpcDials) {
  const std::vector<std::string> good = {
      "unix:cache.sock",  // From the working folder.
      "unix:./run/cache.sock",
      "unix:///run/cairn/cache.sock",
      "unix:/home/a user/cache.sock",  // A file name may hold a space.
      "unix-abstract:cairn-cache",
      "ipv4:127.0.0.1:50051",
      "ipv4:///127.0.0.1:50051",
      "ipv6:[::1]:50051",
      "ipv6:///[::1]:50051",
      "ipv6:[fe80::1%eth0]:50051",
      "dns:localhost:50051",
      "dns:///localhost:50051",
      "dns:///cache.internal.example:443",
      "dns:[::1]:50051",
      "[::1]:50051",
      "[2001:db8::7]:1",
      "cache-0.cairn_svc.local:65535",
      "localhost:050051",  // gRPC reads the port as decimal.
  };
  for (const std::string& target : good) {
    absl::Status s = ValidatePeerAddress(target);

    EXPECT_TRUE(s.ok()) << target << ": " << s;
  }
}

struct Bad {
  std::string target;
  std::string fragment;  // The message names the problem.
};

TEST(ValidatePeerAddressTest, RefusesBadSpellingsNamingTheProblem) {
  const std::vector<Bad> bad = {
      {"", "empty"},
      // gRPC resolved host "garbage" on port 443, and retried for ever.
      {"garbage", "has no port"},
      {"localhost", "has no port"},
      {"localhost:", "has no port"},
      {"unix:", "empty unix socket path"},
      {"unix://", "empty unix socket path"},
      {"unix-abstract:", "empty abstract socket name"},
      {"localhost:http", "not a number"},
      {"localhost:-1", "not a number"},
      {"localhost:+80", "not a number"},
      {"localhost:0", "outside 1-65535"},
      {"localhost:65536", "outside 1-65535"},
      {"localhost:99999999999999999999", "outside 1-65535"},
      {"ipv4:127.0.0.1", "has no port"},
      {"ipv6:[::1]", "has no port after ']'"},
      {"dns:localhost", "has no port"},
      {"dns:///localhost:0", "outside 1-65535"},
      {":50051", "names no host"},
      {"dns:///", "names no host"},
      {" localhost:50051", "begins or ends with a space"},
      {"unix:/run/cairn/cache.sock ", "begins or ends with a space"},
      {"unix: /run/cairn/cache.sock", "begins or ends with a space"},
      {"localhost: 50051", "not a number"},
      {"local host:50051", "neither a host name nor an IP address"},
      {"unix:/run/cairn/cache.sock\n", "control character"},
      {std::string("unix:/run/\0x.sock", 17), "control character"},
      {"localhost:50051\t", "control character"},
      {"http://localhost:8080", "unknown scheme \"http\""},
      {"xds:///cache", "unknown scheme \"xds\""},
      {"tcp:localhost:50051", "unknown scheme \"tcp\""},
      {"UNIX:/run/cairn/cache.sock", "lower-case"},
      {"unix://run/cairn/cache.sock", "authority after unix://"},
      {"dns://8.8.8.8/localhost:50051", "authority after dns://"},
      {"ipv4://127.0.0.1:50051", "authority after ipv4://"},
      {"unix-abstract://cairn", "authority"},
      {"ipv4:localhost:50051", "not an IPv4 address"},
      {"ipv4:127.0.0.1:1,127.0.0.1:2", "several addresses"},
      {"ipv6:::1:50051", "brackets"},
      {"ipv6:[nope]:50051", "not an IPv6 address"},
      {"::1:50051", "IPv6 address without brackets"},
      {"[::1:50051", "without ']'"},
      {"[example.com]:50051", "not an IPv6 address"},
      {"[fe80::1%]:50051", "not an IPv6 address"},
      {"[fe80::1%e 0]:50051", "not an IPv6 address"},
      {"unix:/run/a,b.sock", "list of addresses"},
      {"unix:/run/a?b.sock", "ends the path"},
      {"unix:/run/a#b.sock", "ends the path"},
      {"unix:/run/a%41.sock", "escape"},
      {"unix:/" + std::string(107, 'x'), "longer than 107 bytes"},
  };
  for (const Bad& b : bad) {
    absl::Status s = ValidatePeerAddress(b.target);

    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.target << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), b.fragment)) << b.target << ": " << s;
  }
}

TEST(ValidatePeerAddressTest, TheLongestUnixPathFits) {
  EXPECT_TRUE(ValidatePeerAddress("unix:/" + std::string(106, 'x')).ok());
}

TEST(ValidatePeerAddressTest, TheMessageQuotesTheTargetWithControlsEscaped) {
  absl::Status s = ValidatePeerAddress("unix:/run/x.sock\n");

  EXPECT_EQ(s.message(), "peer address \"unix:/run/x.sock\\n\" holds a control character");
}

}  // namespace
}  // namespace cairn
