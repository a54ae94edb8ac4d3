// Smoke test of the gRPC server runner: health, reflection and drain on a Unix socket and on
// 127.0.0.1:0 (docs/reliability.md RPC4, RPC5, RPC7).

#include "common/grpc/server_runner.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/grpc/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/support/status_matchers.h"

namespace cairn {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A service with no handlers: enough to be listed by reflection.
class EmptyCacheService final : public cairn::cache::v1::CacheService::CallbackService {};

HealthCheckResponse::ServingStatus Check(const std::string& address, const std::string& service,
                                         grpc::Status* status_out) {
  auto stub = Health::NewStub(NewLocalChannel(address));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  auto ctx = NewClientContext(absl::Seconds(5));
  *status_out = stub->Check(ctx.get(), req, &resp);
  return resp.status();
}

std::vector<std::string> ListServices(const std::string& address) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto stub = ServerReflection::NewStub(NewLocalChannel(address));
  auto ctx = NewClientContext(absl::Seconds(5));
  auto stream = stub->ServerReflectionInfo(ctx.get());
  ServerReflectionRequest req;
  req.set_list_services("");
  std::vector<std::string> names;
  if (!stream->Write(req)) return names;
  stream->WritesDone();
  ServerReflectionResponse resp;
  while (stream->Read(&resp)) {
    for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  }
  grpc::Status ignored = stream->Finish();
  (void)ignored;
  return names;
}

void ExerciseRunner(const std::string& listen) {
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = listen;
  options.health_services = {"cairn.cache.v1.CacheService"};
  options.drain_timeout = absl::Seconds(2);
  auto runner = ServerRunner::Start(options, {&service});
  ASSERT_TRUE(runner.ok()) << runner.status();
  const std::string address = (*runner)->address();
  grpc::Status st;

  // Starts NOT_SERVING until the owner says it is ready.
  EXPECT_EQ(Check(address, "", &st), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(st.ok()) << st.error_message();
  (*runner)->SetAllServing(true);
  EXPECT_EQ(Check(address, "", &st), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(address, "cairn.cache.v1.CacheService", &st), HealthCheckResponse::SERVING);
  Check(address, "no.such.Service", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);

  std::vector<std::string> names = ListServices(address);
  EXPECT_NE(std::find(names.begin(), names.end(), "cairn.cache.v1.CacheService"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.health.v1.Health"), names.end());

  (*runner)->Drain();
  (*runner)->Wait();
  Check(address, "", &st);
  EXPECT_FALSE(st.ok());
}

TEST(ServerRunnerTest, ServesHealthAndReflectionOnTcpPortZero) { ExerciseRunner("127.0.0.1:0"); }

TEST(ServerRunnerTest, ServesHealthAndReflectionOnAUnixSocket) {
  std::string path = ::testing::TempDir() + "/cairn-runner-" + std::to_string(::getpid()) + ".sock";

  ExerciseRunner("unix:" + path);

  EXPECT_NE(::access(path.c_str(), F_OK), 0);  // Removed after shutdown.
}

// A Unix-socket relay that takes one connection and starts relaying to `target_path` only after
// `delay`: to the client, a peer whose handshake (its SETTINGS frame) comes late, as from a
// daemon whose threads are all busy.
class SlowRelay {
 public:
  SlowRelay(std::string path, std::string target_path, std::chrono::milliseconds delay)
      : path_(std::move(path)), target_path_(std::move(target_path)), delay_(delay) {}
  ~SlowRelay() {
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) ::close(listener_);
    ::unlink(path_.c_str());
  }
  bool Start() {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr = Address(path_);
    ::unlink(path_.c_str());
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_, 4) != 0) {
      return false;
    }
    thread_ = std::thread([this] { Relay(); });
    return true;
  }

 private:
  static sockaddr_un Address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    return addr;
  }
  void Relay() {
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) return;
    std::this_thread::sleep_for(delay_);
    const int server = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr = Address(target_path_);
    if (server >= 0 && ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      char buf[16384];
      bool open = true;
      while (open && ::poll(fds, 2, 5000) > 0) {
        for (int i = 0; i < 2 && open; ++i) {
          if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
          open = n > 0 && ::send(fds[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) == n;
        }
      }
    }
    if (server >= 0) ::close(server);
    ::close(client);
  }

  const std::string path_;
  const std::string target_path_;
  const std::chrono::milliseconds delay_;
  int listener_ = -1;
  std::thread thread_;
};

// A peer that is up but slow to answer the HTTP/2 handshake is waited for (within the call's
// deadline), not failed: gRPC gives a connection attempt the "minimum connect timeout", which
// it reads from GRPC_ARG_MIN_RECONNECT_BACKOFF_MS; at the reconnect backoff's 100 ms, such calls
// failed with "connection attempt timed out before receiving SETTINGS frame".
TEST(ServerRunnerTest, APeerSlowToFinishTheHandshakeIsWaitedFor) {
  const std::string dir = ::testing::TempDir();
  const std::string server_path = dir + "/cairn-runner-slow-" + std::to_string(::getpid());
  const std::string relay_path = server_path + "-relay";
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "unix:" + server_path;
  auto runner = ServerRunner::Start(options, {&service});
  ASSERT_TRUE(runner.ok()) << runner.status();
  (*runner)->SetAllServing(true);
  SlowRelay relay(relay_path, server_path, std::chrono::milliseconds(600));
  ASSERT_TRUE(relay.Start());

  grpc::Status st;
  EXPECT_EQ(Check("unix:" + relay_path, "", &st), HealthCheckResponse::SERVING);
  EXPECT_TRUE(st.ok()) << st.error_message();

  (*runner)->Drain();
  (*runner)->Wait();
}

TEST(ServerRunnerTest, TcpPortIsReported) {
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "127.0.0.1:0";

  auto runner = ServerRunner::Start(options, {&service});

  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_GT((*runner)->port(), 0);
}

TEST(ServerRunnerTest, BadListenAddressesAreInvalidArgument) {
  for (const std::string& bad :
       {std::string("nonsense"), std::string("unix:"), std::string("127.0.0.1:99999"),
        std::string(":80"), "unix:" + std::string(200, 'x')}) {
    EXPECT_EQ(ParseListenAddress(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ServerRunnerTest, RefusesToReplaceANonSocketFile) {
  std::string path = ::testing::TempDir() + "/cairn-runner-regular-file";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "unix:" + path;

  auto runner = ServerRunner::Start(options, {&service});

  EXPECT_EQ(runner.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  ::unlink(path.c_str());
}

TEST(ServerRunnerTest, ASecondServerOnALiveUnixSocketIsRefusedAndTheFirstKeepsIt) {
  const std::string path =
      ::testing::TempDir() + "/cairn-runner-twice-" + std::to_string(::getpid()) + ".sock";
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "unix:" + path;
  auto first = ServerRunner::Start(options, {&service});
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->SetAllServing(true);

  auto second = ServerRunner::Start(options, {&service});

  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists) << second.status();
  grpc::Status st;
  EXPECT_EQ(Check(options.listen, "", &st), HealthCheckResponse::SERVING) << st.error_message();
}

TEST(ServerRunnerTest, AStaleUnixSocketIsReplaced) {
  const std::string path =
      ::testing::TempDir() + "/cairn-runner-stale-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  // A socket bound but never listened on: what a daemon killed with SIGKILL leaves behind.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "unix:" + path;

  auto runner = ServerRunner::Start(options, {&service});

  ASSERT_TRUE(runner.ok()) << runner.status();
  (*runner)->SetAllServing(true);
  grpc::Status st;
  EXPECT_EQ(Check(options.listen, "", &st), HealthCheckResponse::SERVING) << st.error_message();
}

TEST(ServerRunnerTest, ASecondServerOnTheSameTcpPortIsRefused) {
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "127.0.0.1:0";
  auto first = ServerRunner::Start(options, {&service});
  ASSERT_TRUE(first.ok()) << first.status();
  options.listen = "127.0.0.1:" + std::to_string((*first)->port());

  auto second = ServerRunner::Start(options, {&service});

  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(ServerRunnerTest, AMissingSocketFolderIsNamed) {
  EmptyCacheService service;
  ServerRunnerOptions options;
  options.listen = "unix:/nonexistent-cairn-dir/cache.sock";

  auto runner = ServerRunner::Start(options, {&service});

  EXPECT_EQ(runner.status().code(), absl::StatusCode::kNotFound) << runner.status();
  EXPECT_NE(runner.status().message().find("/nonexistent-cairn-dir/"), absl::string_view::npos)
      << runner.status();
}

}  // namespace
}  // namespace cairn
