#ifndef CAIRN_COMMON_CONFIG_FLAGS_H_
#define CAIRN_COMMON_CONFIG_FLAGS_H_

// Typed options from command-line flags and config files.
//
// Each binary fills a `<Thing>Options` struct (default member initializers are the defaults)
// by binding its fields to named flags:
//
//   CacheOptions opts;
//   cairn::FlagSet flags("cairn-cache", "the cache daemon");
//   flags.Add("cache-ram-bytes", &opts.ram_bytes, "RAM budget in bytes (K, M, G, Ki, Mi, Gi)");
//   absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
//
// Command line: `--name=value`, `--name value`, `--flag` / `--noflag` for booleans, `--` ends
// flags. `--config FILE` (always available) reads `name = value` lines (`#` starts a comment,
// blank lines are ignored, values may be double-quoted); flags given on the command line win
// over the file wherever they appear. The file must be a regular file of at most
// kMaxConfigFileBytes. `--help` makes Parse return a Cancelled status whose
// message is the usage text. Unknown names, missing or malformed values, out-of-range numbers
// and repeated keys inside one file are InvalidArgument errors naming the flag (and file:line).
//
// Thread-compatible.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cairn {

// Parses a byte count: a non-negative integer with an optional suffix K/M/G/T (powers of
// 1000) or Ki/Mi/Gi/Ti (powers of 1024), e.g. "32Gi". InvalidArgument on overflow or junk.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);
// Parses a duration as absl does ("500ms", "2s", "1h30m").
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text);

// The most threads a thread-count flag may ask for: far more than any machine needs, far
// fewer than would fail to start (std::thread throws, and the daemon would abort).
inline constexpr int kMaxThreadsFlag = 1024;

// Upper bounds for the bounded Add overloads of flags that have none but their type's.
inline constexpr int kNoMax = std::numeric_limits<int>::max();
inline constexpr int64_t kNoMax64 = std::numeric_limits<int64_t>::max();
inline constexpr double kNoMaxReal = std::numeric_limits<double>::infinity();

// The largest config file --config reads: far more than any real one, small enough that a
// device or a runaway file (--config /dev/zero) is an error, not an allocation failure.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{1} << 20;

// Says whether a flag's value is acceptable: OK, or why not (without the flag's name).
using FlagValidator = std::function<absl::Status(absl::string_view)>;

class FlagSet {
 public:
  FlagSet(std::string program, std::string description);
  ~FlagSet();
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Binds flag `name` to `*field`; `field` must outlive this object. The field's value at
  // the time of the call is shown as the default in the usage text.
  void Add(std::string name, std::string* field, std::string help);
  void Add(std::string name, bool* field, std::string help);
  void Add(std::string name, int64_t* field, std::string help);
  void Add(std::string name, int* field, std::string help);
  void Add(std::string name, double* field, std::string help);
  void Add(std::string name, absl::Duration* field, std::string help);
  // Like the Add overloads above, but a value outside [`min`, `max`] is an InvalidArgument
  // error naming the flag (a NaN is always outside). For counts that must be positive, thread
  // counts that must stay below what the machine can start, shares in [0, 1].
  void Add(std::string name, int* field, std::string help, int min, int max);
  void Add(std::string name, int64_t* field, std::string help, int64_t min, int64_t max);
  void Add(std::string name, double* field, std::string help, double min, double max);
  // Like Add, but a duration below `min` is an InvalidArgument error naming the flag: a zero
  // interval that would poll in a busy loop, a negative or zero timeout.
  void Add(std::string name, absl::Duration* field, std::string help, absl::Duration min);
  // Like Add, but a duration outside [`min`, `max`] is an InvalidArgument error naming the flag:
  // a timeout must be positive, and one of centuries ("inf", "2562047h") would overflow the
  // clock it is added to.
  void Add(std::string name, absl::Duration* field, std::string help, absl::Duration min,
           absl::Duration max);
  // A byte count (ParseByteSize).
  void AddBytes(std::string name, uint64_t* field, std::string help);
  // A list of strings: comma-separated, or the flag repeated (values accumulate).
  void Add(std::string name, std::vector<std::string>* field, std::string help);
  // Like Add for a string or a list of strings, but each value (each element of a list) is
  // passed to `validate` first, and one it refuses is an InvalidArgument error naming the flag
  // with `validate`'s message. For values with a syntax of their own, such as peer addresses
  // (ValidatePeerAddress in common/grpc/peer_address.h). The default is not validated.
  void Add(std::string name, std::string* field, std::string help, FlagValidator validate);
  void Add(std::string name, std::vector<std::string>* field, std::string help,
           FlagValidator validate);

  // Parses `argv[1..argc)`. Returns the positional arguments in order.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, const char* const* argv);
  absl::StatusOr<std::vector<std::string>> Parse(const std::vector<std::string>& args);
  // Applies `name = value` lines from `text` (as read from `origin`, used in messages).
  // Flags already given on the command line are left alone.
  absl::Status ApplyConfigText(absl::string_view text, absl::string_view origin);

  // Returns true if `name` was set by the command line or a config file.
  bool WasSet(absl::string_view name) const;
  std::string Usage() const;

 private:
  struct Flag;
  Flag* Find(absl::string_view name);
  const Flag* Find(absl::string_view name) const;
  void AddFlag(std::string name, std::string help, std::string default_text, bool is_bool,
               std::function<absl::Status(absl::string_view)> set);
  absl::Status ApplyConfigFile(const std::string& path);

  std::string program_;
  std::string description_;
  std::vector<std::unique_ptr<Flag>> flags_;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_CONFIG_FLAGS_H_
