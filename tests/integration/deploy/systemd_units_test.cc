// Checks that each unit in deploy/systemd/ starts the real binary with the shipped
// configuration: the ExecStart= line is read from the unit, its binary mapped to the build
// tree and its /etc/cairn/ config to deploy/config/; the daemon must reach SERVING (gRPC
// health, or an HTTP answer on /health for the gateway) and exit 0 on SIGTERM. Also runs
// `systemd-analyze verify` and `security` on the units when available (docs/reliability.md G7),
// and checks cairn.target, the tmpfiles.d and sysusers.d entries.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "tests/support/free_port.h"

namespace cairn {
namespace {

std::string SourceDir() {
  const char* d = std::getenv("CAIRN_SOURCE_DIR");
  return d == nullptr ? "." : d;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The words of every `key`= line of the unit, in order.
std::vector<std::string> UnitValues(const std::string& unit_text, absl::string_view key) {
  std::vector<std::string> values;
  const std::string prefix = absl::StrCat(key, "=");
  for (absl::string_view line : absl::StrSplit(unit_text, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    for (absl::string_view w : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      values.emplace_back(w);
    }
  }
  return values;
}

bool Contains(const std::vector<std::string>& values, const std::string& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// The words of the unit's ExecStart= line.
std::vector<std::string> ExecStart(const std::string& unit_text) {
  for (absl::string_view line : absl::StrSplit(unit_text, '\n')) {
    if (absl::ConsumePrefix(&line, "ExecStart=")) {
      return absl::StrSplit(line, ' ', absl::SkipEmpty());
    }
  }
  return {};
}

bool CommandExists(const std::string& name) {
  return std::system(absl::StrCat("command -v ", name, " >/dev/null 2>&1").c_str()) == 0;
}

struct UnitCase {
  std::string unit;                    // File in deploy/systemd/.
  std::string binary_path;             // Relative to the build directory.
  std::string service_name;            // Reported by the health service; "" for HTTP.
  std::vector<std::string> test_args;  // Flags that move sockets into a temp dir (flags win);
                                       // $DIR and $PORT (a free TCP port) are substituted.
  double max_exposure;                 // systemd-analyze security threshold.
  std::string model_preset = "";       // Writes this random model to $DIR/model first.
};

// gtest names the case by its unit file in test listings instead of dumping its bytes.
void PrintTo(const UnitCase& c, std::ostream* os) { *os << c.unit; }

// Returns true if an HTTP server on 127.0.0.1:`port` answers GET /health (any status: the
// gateway answers 503 while no inference daemon is ready).
bool HttpAnswers(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char buf[16] = {};
    ok = ::write(fd, req, sizeof(req) - 1) == sizeof(req) - 1 && ::read(fd, buf, 9) == 9 &&
         absl::StartsWith(buf, "HTTP/1.1 ");
  }
  ::close(fd);
  return ok;
}

class SystemdUnitsTest : public ::testing::TestWithParam<UnitCase> {};

TEST_P(SystemdUnitsTest, UnitStartsTheRealBinaryWithTheShippedConfig) {
  const UnitCase& c = GetParam();
  std::vector<std::string> words = ExecStart(ReadFile(SourceDir() + "/deploy/systemd/" + c.unit));
  ASSERT_GE(words.size(), 1u) << c.unit << " has no ExecStart=";
  ASSERT_TRUE(absl::StartsWith(words[0], "/usr/local/bin/")) << words[0];
  std::vector<std::string> argv = {std::string(CAIRN_BINARY_DIR) + "/" + c.binary_path};
  for (size_t i = 1; i < words.size(); ++i) {
    std::string w = words[i];
    if (absl::StartsWith(w, "/etc/cairn/")) {
      w = SourceDir() + "/deploy/config/" + w.substr(std::string("/etc/cairn/").size());
      ASSERT_EQ(::access(w.c_str(), R_OK), 0) << "shipped config " << w << " is missing";
    }
    argv.push_back(w);
  }
  const std::string dir = ::testing::TempDir() + "/cairn-unit-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  const int port = ::cairn::testing::FreeLoopbackPort();
  for (const std::string& a : c.test_args) {
    argv.push_back(absl::StrReplaceAll(a, {{"$DIR", dir}, {"$PORT", std::to_string(port)}}));
  }
  if (!c.model_preset.empty()) {
    absl::StatusOr<infer::RandomCheckpointOptions> preset =
        infer::RandomCheckpointPreset(c.model_preset);
    ASSERT_TRUE(preset.ok()) << preset.status();
    absl::Status written = infer::WriteRandomCheckpoint(dir + "/model", *preset);
    ASSERT_TRUE(written.ok()) << written;
  }

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  bool serving = false;
  for (int attempt = 0; attempt < 100 && !serving; ++attempt) {
    if (c.service_name.empty()) {
      serving = HttpAnswers(port);
      if (!serving) absl::SleepFor(absl::Milliseconds(100));  // Polling a child process.
      continue;
    }
    // A fresh channel per attempt: a channel that failed to connect backs off for seconds.
    auto stub = grpc::health::v1::Health::NewStub(NewLocalChannel("unix:" + dir + "/grpc.sock"));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(c.service_name);
    grpc::health::v1::HealthCheckResponse resp;
    auto ctx = NewClientContext(absl::Milliseconds(200));
    grpc::Status s = stub->Check(ctx.get(), req, &resp);
    serving = s.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    if (!serving) absl::SleepFor(absl::Milliseconds(100));  // Polling a child process.
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);

  EXPECT_TRUE(serving) << c.unit << " never reported SERVING";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A bad configuration value exits 2, and the unit does not restart on 2: the unit fails once
// with the daemon's message in the journal instead of restarting until StartLimitBurst.
TEST_P(SystemdUnitsTest, ABadConfigValueFailsTheUnitWithoutRestarts) {
  const UnitCase& c = GetParam();
  const std::string unit = ReadFile(SourceDir() + "/deploy/systemd/" + c.unit);
  std::vector<std::string> words = ExecStart(unit);
  ASSERT_GE(words.size(), 1u) << c.unit << " has no ExecStart=";
  std::string cmd = absl::StrCat(CAIRN_BINARY_DIR, "/", c.binary_path);
  for (size_t i = 1; i < words.size(); ++i) {
    std::string w = words[i];
    if (absl::StartsWith(w, "/etc/cairn/")) {
      w = SourceDir() + "/deploy/config/" + w.substr(std::string("/etc/cairn/").size());
    }
    absl::StrAppend(&cmd, " ", w);
  }
  absl::StrAppend(&cmd, " --log-level=loud >/dev/null 2>&1");

  const int status = std::system(cmd.c_str());

  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(Contains(UnitValues(unit, "RestartPreventExitStatus"), "2")) << c.unit;
}

TEST_P(SystemdUnitsTest, UnitPassesSystemdAnalyzeSecurity) {
  const UnitCase& c = GetParam();
  if (!CommandExists("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  std::string cmd = absl::StrCat(
      "systemd-analyze security --offline=true --threshold=", static_cast<int>(c.max_exposure * 10),
      " ", SourceDir(), "/deploy/systemd/", c.unit, " >/dev/null 2>&1");

  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST_P(SystemdUnitsTest, UnitPassesSystemdAnalyzeVerify) {
  const UnitCase& c = GetParam();
  if (!CommandExists("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  // verify wants the binary at its ExecStart path: check a copy pointing at the build tree.
  const std::string dir = ::testing::TempDir() + "/cairn-verify-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  std::string text = ReadFile(SourceDir() + "/deploy/systemd/" + c.unit);
  text = absl::StrReplaceAll(
      text, {{"/usr/local/bin/" + c.binary_path.substr(c.binary_path.rfind('/') + 1),
              std::string(CAIRN_BINARY_DIR) + "/" + c.binary_path}});
  std::ofstream(dir + "/" + c.unit) << text;
  std::string out = dir + "/verify.log";
  std::string cmd = absl::StrCat("systemd-analyze verify ", dir, "/", c.unit, " >", out, " 2>&1");

  int rc = std::system(cmd.c_str());

  EXPECT_EQ(rc, 0) << ReadFile(out);
}

INSTANTIATE_TEST_SUITE_P(
    Units, SystemdUnitsTest,
    ::testing::Values(UnitCase{"cairn-cache.service",
                               "services/cache/cairn-cache",
                               "cairn.cache.v1.CacheService",
                               {"--listen=unix:$DIR/grpc.sock", "--arena-socket=$DIR/arena.sock",
                                "--cache-ram-bytes=64Mi", "--cache-disk=$DIR/disk",
                                "--cache-disk-bytes=64Mi"},
                               2.0},
                      UnitCase{"cairn-infer.service",
                               "services/infer/daemon/cairn-infer",
                               "cairn.infer.v1.InferService",
                               {"--listen=unix:$DIR/grpc.sock", "--model=$DIR/model",
                                "--cache=unix:$DIR/no-cache.sock", "--threads=1", "--context=256"},
                               // Devices stay reachable for GPUs.
                               4.0,
                               "dense"},
                      UnitCase{"cairn-gateway.service",
                               "services/gateway/cairn-gateway",
                               "",
                               {"--listen=127.0.0.1:$PORT", "--infer=unix:$DIR/infer.sock"},
                               2.0}),
    [](const ::testing::TestParamInfo<UnitCase>& param_info) {
      const std::string& unit = param_info.param.unit;
      std::string name = unit.substr(0, unit.find('.'));
      name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
      return name;
    });

constexpr const char* kServices[] = {"cairn-cache.service", "cairn-infer.service",
                                     "cairn-gateway.service"};

TEST(SystemdTargetTest, TargetStartsAndStopsAllThreeDaemons) {
  const std::string target = ReadFile(SourceDir() + "/deploy/systemd/cairn.target");
  const std::string gateway = ReadFile(SourceDir() + "/deploy/systemd/cairn-gateway.service");

  for (const char* service : kServices) {
    const std::string unit = ReadFile(SourceDir() + "/deploy/systemd/" + service);
    EXPECT_TRUE(Contains(UnitValues(target, "Wants"), service)) << service;
    EXPECT_TRUE(Contains(UnitValues(unit, "PartOf"), "cairn.target")) << service;
    EXPECT_TRUE(Contains(UnitValues(unit, "WantedBy"), "cairn.target")) << service;
  }
  EXPECT_TRUE(Contains(UnitValues(gateway, "After"), "cairn-infer.service"));
  EXPECT_TRUE(Contains(UnitValues(gateway, "Wants"), "cairn-infer.service"));
}

TEST(SystemdTargetTest, TargetAndUnitsPassSystemdAnalyzeVerifyTogether) {
  if (!CommandExists("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  const std::string dir = ::testing::TempDir() + "/cairn-target-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  std::vector<std::string> files = {"cairn.target"};
  for (const char* service : kServices) files.push_back(service);
  std::string cmd = "systemd-analyze verify";
  for (const std::string& file : files) {
    // verify wants each ExecStart binary to exist: point them at the build tree.
    std::string text =
        absl::StrReplaceAll(ReadFile(SourceDir() + "/deploy/systemd/" + file),
                            {{"/usr/local/bin/cairn-cache",
                              std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache"},
                             {"/usr/local/bin/cairn-infer",
                              std::string(CAIRN_BINARY_DIR) + "/services/infer/daemon/cairn-infer"},
                             {"/usr/local/bin/cairn-gateway",
                              std::string(CAIRN_BINARY_DIR) + "/services/gateway/cairn-gateway"}});
    std::ofstream(dir + "/" + file) << text;
    absl::StrAppend(&cmd, " ", dir, "/", file);
  }
  const std::string out = dir + "/verify.log";
  absl::StrAppend(&cmd, " >", out, " 2>&1");

  int rc = std::system(cmd.c_str());

  EXPECT_EQ(rc, 0) << ReadFile(out);
}

// The entry's owner is replaced by the test's user, which exists (cairn may not).
TEST(SystemdTmpfilesTest, MakesTheRuntimeAndStateDirectories) {
  if (!CommandExists("systemd-tmpfiles")) GTEST_SKIP() << "systemd-tmpfiles is not installed";
  const std::string root = ::testing::TempDir() + "/cairn-tmpfiles-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", root, " && mkdir -p ", root).c_str()), 0);
  const std::string user = std::to_string(::getuid());
  const std::string group = std::to_string(::getgid());
  const std::string text =
      absl::StrReplaceAll(ReadFile(SourceDir() + "/deploy/tmpfiles.d/cairn.conf"),
                          {{" cairn cairn ", absl::StrCat(" ", user, " ", group, " ")}});
  std::ofstream(root + "/cairn.conf") << text;
  const std::string cmd = absl::StrCat("systemd-tmpfiles --create --root=", root, " ", root,
                                       "/cairn.conf >", root, "/tmpfiles.log 2>&1");

  int rc = std::system(cmd.c_str());

  EXPECT_EQ(rc, 0) << ReadFile(root + "/tmpfiles.log");
  for (const char* path : {"/run/cairn", "/var/lib/cairn"}) {
    struct stat st {};
    ASSERT_EQ(::stat((root + path).c_str(), &st), 0) << path;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << path;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << path;
  }
}

TEST(SystemdSysusersTest, MakesTheCairnUser) {
  if (!CommandExists("systemd-sysusers")) GTEST_SKIP() << "systemd-sysusers is not installed";
  const std::string root = ::testing::TempDir() + "/cairn-sysusers-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", root, " && mkdir -p ", root, "/etc").c_str()), 0);
  const std::string cmd =
      absl::StrCat("systemd-sysusers --root=", root, " ", SourceDir(),
                   "/deploy/sysusers.d/cairn.conf >", root, "/sysusers.log 2>&1");

  int rc = std::system(cmd.c_str());

  EXPECT_EQ(rc, 0) << ReadFile(root + "/sysusers.log");
  EXPECT_TRUE(absl::StartsWith(ReadFile(root + "/etc/passwd"), "cairn:"))
      << ReadFile(root + "/etc/passwd");
}

}  // namespace
}  // namespace cairn
