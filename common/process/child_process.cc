#include "common/process/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cairn {
namespace {

// How often WaitServing asks; each attempt uses a fresh channel, because a channel that failed
// to connect backs off for seconds.
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
constexpr absl::Duration kCheckTimeout = absl::Milliseconds(200);

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string address)
    : argv_(std::move(argv)), address_(std::move(address)) {}

ChildProcess::~ChildProcess() { Kill(); }

absl::Status ChildProcess::Start() {
  if (pid_ > 0) return absl::OkStatus();
  std::vector<char*> raw;
  for (std::string& a : argv_) raw.push_back(a.data());
  raw.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status ChildProcess::WaitServing(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat(argv_[0], " exited"));
    }
    auto stub = grpc::health::v1::Health::NewStub(NewLocalChannel(address_));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    auto ctx = NewClientContext(kCheckTimeout);
    if (stub->Check(ctx.get(), req, &resp).ok() &&
        resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::OkStatus();
    }
    absl::SleepFor(kPollInterval);  // Polling another process's start.
  }
  return absl::DeadlineExceededError(absl::StrCat(argv_[0], " not serving on ", address_));
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int ChildProcess::Terminate() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace cairn
