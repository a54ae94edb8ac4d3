// cairnctl's address handling for its online verbs (ParseFlags in rpc_commands.cc): a bad --addr,
// or a bad default from the environment, is refused before any call, with exit status 2.

#include <stdlib.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/config/flags.h"
#include "gtest/gtest.h"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/rpc_util.h"

namespace cairn::cairnctl {
namespace {

struct Outcome {
  int code = -1;
  std::string err;
};

Outcome Cairnctl(std::vector<std::string> args) {
  args.insert(args.begin(), "cairnctl");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, err.str()};
}

// Sets an environment variable for the life of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ParseFlagsTest, ABadAddrIsExitTwoNamingTheFlag) {
  FlagSet flags("cairnctl status", "");
  CommonFlags common;
  std::ostringstream out, err;
  int code = 0;

  ParseFlags(flags, common, {"--addr=garbage"}, out, err, &code);

  EXPECT_EQ(code, 2);
  EXPECT_EQ(err.str(),
            "cairnctl: --addr: peer address \"garbage\" has no port (want unix:PATH or "
            "HOST:PORT)\n");
}

TEST(ParseFlagsTest, AGoodAddrGoesOn) {
  FlagSet flags("cairnctl status", "");
  CommonFlags common;
  std::ostringstream out, err;
  int code = 0;

  ParseFlags(flags, common, {"--addr", "unix:///run/cairn/cache.sock"}, out, err, &code);

  EXPECT_EQ(code, -1) << err.str();
  EXPECT_EQ(common.addr, "unix:///run/cairn/cache.sock");
}

TEST(CairnctlAddressTest, EveryOnlineVerbRefusesABadAddrBeforeCalling) {
  for (const char* verb : {"list", "status", "events", "flush", "slots", "model"}) {
    for (const char* addr : {"--addr=garbage", "--addr=unix:", "--addr=localhost:0"}) {
      const Outcome o = Cairnctl({verb, addr});

      EXPECT_EQ(o.code, 2) << verb << " " << addr << ": " << o.err;
      EXPECT_TRUE(absl::StrContains(o.err, "--addr: peer address")) << verb << ": " << o.err;
    }
  }
}

TEST(CairnctlAddressTest, ABadDefaultFromTheEnvironmentIsRefused) {
  ScopedEnv cache("CAIRN_CACHE_ADDR", "garbage");
  ScopedEnv infer("CAIRN_INFER_ADDR", "unix:");

  const Outcome status = Cairnctl({"status"});
  const Outcome slots = Cairnctl({"slots"});

  EXPECT_EQ(status.code, 2) << status.err;
  EXPECT_TRUE(absl::StrContains(status.err, "default --addr (from CAIRN_CACHE_ADDR")) << status.err;
  EXPECT_TRUE(absl::StrContains(status.err, "\"garbage\" has no port")) << status.err;
  EXPECT_EQ(slots.code, 2) << slots.err;
  EXPECT_TRUE(absl::StrContains(slots.err, "\"unix:\" has an empty unix socket path")) << slots.err;
}

TEST(CairnctlAddressTest, AGoodAddrThatNobodyServesIsACallFailureNotABadArgument) {
  ScopedEnv cache("CAIRN_CACHE_ADDR", "garbage");  // Unused: --addr wins.

  const Outcome o = Cairnctl({"status", "--addr=unix:/nonexistent/cache.sock", "--timeout=2s"});

  EXPECT_EQ(o.code, 1) << o.err;
}

}  // namespace
}  // namespace cairn::cairnctl
