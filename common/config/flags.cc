#include "common/config/flags.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status/status_macros.h"

namespace cairn {

struct FlagSet::Flag {
  std::string name;
  std::string help;
  std::string default_text;
  bool is_bool = false;
  bool from_command_line = false;
  bool set = false;
  std::function<absl::Status(absl::string_view)> setter;
};

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(t[digits])) ++digits;
  if (digits == 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte size \"", text, "\" has no digits"));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(t.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("byte size \"", text, "\" is too large"));
  }
  absl::string_view suffix = t.substr(digits);
  uint64_t multiplier = 1;
  if (suffix.empty() || suffix == "B") {
    multiplier = 1;
  } else if (suffix == "K" || suffix == "KB") {
    multiplier = 1000ull;
  } else if (suffix == "M" || suffix == "MB") {
    multiplier = 1000ull * 1000;
  } else if (suffix == "G" || suffix == "GB") {
    multiplier = 1000ull * 1000 * 1000;
  } else if (suffix == "T" || suffix == "TB") {
    multiplier = 1000ull * 1000 * 1000 * 1000;
  } else if (suffix == "Ki" || suffix == "KiB") {
    multiplier = 1ull << 10;
  } else if (suffix == "Mi" || suffix == "MiB") {
    multiplier = 1ull << 20;
  } else if (suffix == "Gi" || suffix == "GiB") {
    multiplier = 1ull << 30;
  } else if (suffix == "Ti" || suffix == "TiB") {
    multiplier = 1ull << 40;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size \"", text, "\" has unknown suffix \"", suffix, "\""));
  }
  if (value > std::numeric_limits<uint64_t>::max() / multiplier) {
    return absl::InvalidArgumentError(absl::StrCat("byte size \"", text, "\" overflows"));
  }
  return value * multiplier;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text) {
  absl::Duration d;
  if (!absl::ParseDuration(absl::StripAsciiWhitespace(text), &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration \"", text, "\" is malformed (want e.g. 500ms, 2s)"));
  }
  return d;
}

namespace {

template <typename T>
absl::Status OutOfRange(absl::string_view name, absl::string_view value, T min, T max) {
  const bool lowest =
      min == std::numeric_limits<T>::lowest() || (std::numeric_limits<T>::has_infinity && min < 0 &&
                                                  min == -std::numeric_limits<T>::infinity());
  const bool highest =
      max == std::numeric_limits<T>::max() ||
      (std::numeric_limits<T>::has_infinity && max == std::numeric_limits<T>::infinity());
  std::string bounds;
  if (lowest) {
    bounds = absl::StrCat("at most ", max);
  } else if (highest) {
    bounds = absl::StrCat("at least ", min);
  } else {
    bounds = absl::StrCat("between ", min, " and ", max);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, ": \"", value, "\" is out of range (must be ", bounds, ")"));
}

// Parses an integer of type T into `*field`, refusing values outside [`min`, `max`].
template <typename T>
std::function<absl::Status(absl::string_view)> IntegerSetter(T* field, std::string name, T min,
                                                             T max, const char* type_name) {
  return [field, name = std::move(name), min, max, type_name](absl::string_view v) {
    T x;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &x)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": \"", v, "\" is not ", type_name));
    }
    if (x < min || x > max) return OutOfRange(absl::string_view(name), v, min, max);
    *field = x;
    return absl::OkStatus();
  };
}

// Returns `validate`'s verdict on `value` (OK without one), its message prefixed by the flag.
absl::Status Validated(absl::string_view name, absl::string_view value,
                       const FlagValidator& validate) {
  if (!validate) return absl::OkStatus();
  absl::Status s = validate(value);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", s.message()));
}

}  // namespace

FlagSet::FlagSet(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

FlagSet::~FlagSet() = default;

void FlagSet::AddFlag(std::string name, std::string help, std::string default_text, bool is_bool,
                      std::function<absl::Status(absl::string_view)> set) {
  auto flag = std::make_unique<Flag>();
  flag->name = std::move(name);
  flag->help = std::move(help);
  flag->default_text = std::move(default_text);
  flag->is_bool = is_bool;
  flag->setter = std::move(set);
  flags_.push_back(std::move(flag));
}

void FlagSet::Add(std::string name, std::string* field, std::string help) {
  Add(std::move(name), field, std::move(help), FlagValidator());
}

void FlagSet::Add(std::string name, std::string* field, std::string help, FlagValidator validate) {
  AddFlag(name, std::move(help), absl::StrCat("\"", *field, "\""), false,
          [field, name, validate = std::move(validate)](absl::string_view v) {
            RETURN_IF_ERROR(Validated(name, v, validate));
            *field = std::string(v);
            return absl::OkStatus();
          });
}

void FlagSet::Add(std::string name, bool* field, std::string help) {
  AddFlag(name, std::move(help), *field ? "true" : "false", true,
          [field, name](absl::string_view v) {
            std::string t = absl::AsciiStrToLower(v);
            if (t == "true" || t == "1" || t == "yes" || t == "on") {
              *field = true;
            } else if (t == "false" || t == "0" || t == "no" || t == "off") {
              *field = false;
            } else {
              return absl::InvalidArgumentError(
                  absl::StrCat("--", name, ": \"", v, "\" is not a boolean"));
            }
            return absl::OkStatus();
          });
}

void FlagSet::Add(std::string name, int64_t* field, std::string help) {
  Add(std::move(name), field, std::move(help), std::numeric_limits<int64_t>::min(),
      std::numeric_limits<int64_t>::max());
}

void FlagSet::Add(std::string name, int64_t* field, std::string help, int64_t min, int64_t max) {
  AddFlag(name, std::move(help), absl::StrCat(*field), false,
          IntegerSetter(field, name, min, max, "a 64-bit integer"));
}

void FlagSet::Add(std::string name, int* field, std::string help) {
  Add(std::move(name), field, std::move(help), std::numeric_limits<int>::min(),
      std::numeric_limits<int>::max());
}

void FlagSet::Add(std::string name, int* field, std::string help, int min, int max) {
  AddFlag(name, std::move(help), absl::StrCat(*field), false,
          IntegerSetter(field, name, min, max, "a 32-bit integer"));
}

void FlagSet::Add(std::string name, double* field, std::string help) {
  Add(std::move(name), field, std::move(help), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity());
}

void FlagSet::Add(std::string name, double* field, std::string help, double min, double max) {
  AddFlag(name, std::move(help), absl::StrCat(*field), false,
          [field, name, min, max](absl::string_view v) {
            double x;
            if (!absl::SimpleAtod(absl::StripAsciiWhitespace(v), &x)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--", name, ": \"", v, "\" is not a number"));
            }
            if (std::isnan(x)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--", name, ": \"", v, "\" is not a number (NaN)"));
            }
            if (!(x >= min && x <= max)) return OutOfRange(name, v, min, max);
            *field = x;
            return absl::OkStatus();
          });
}

void FlagSet::Add(std::string name, absl::Duration* field, std::string help) {
  Add(std::move(name), field, std::move(help), -absl::InfiniteDuration());
}

void FlagSet::Add(std::string name, absl::Duration* field, std::string help, absl::Duration min) {
  Add(std::move(name), field, std::move(help), min, absl::InfiniteDuration());
}

void FlagSet::Add(std::string name, absl::Duration* field, std::string help, absl::Duration min,
                  absl::Duration max) {
  AddFlag(
      name, std::move(help), absl::FormatDuration(*field), false,
      [field, name, min, max](absl::string_view v) -> absl::Status {
        absl::StatusOr<absl::Duration> d = ParseDurationFlag(v);
        if (!d.ok())
          return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", d.status().message()));
        if (*d < min) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--", name, ": \"", v, "\" is below the least allowed, ", absl::FormatDuration(min)));
        }
        if (*d > max) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--", name, ": \"", v, "\" is above the most allowed, ", absl::FormatDuration(max)));
        }
        *field = *d;
        return absl::OkStatus();
      });
}

void FlagSet::AddBytes(std::string name, uint64_t* field, std::string help) {
  AddFlag(
      name, std::move(help), absl::StrCat(*field), false,
      [field, name](absl::string_view v) -> absl::Status {
        absl::StatusOr<uint64_t> b = ParseByteSize(v);
        if (!b.ok())
          return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", b.status().message()));
        *field = *b;
        return absl::OkStatus();
      });
}

void FlagSet::Add(std::string name, std::vector<std::string>* field, std::string help) {
  Add(std::move(name), field, std::move(help), FlagValidator());
}

void FlagSet::Add(std::string name, std::vector<std::string>* field, std::string help,
                  FlagValidator validate) {
  AddFlag(name, std::move(help), absl::StrCat("\"", absl::StrJoin(*field, ","), "\""), false,
          [field, name, validate = std::move(validate),
           cleared = false](absl::string_view v) mutable -> absl::Status {
            std::vector<std::string> parts;
            for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
              parts.emplace_back(absl::StripAsciiWhitespace(part));
              RETURN_IF_ERROR(Validated(name, parts.back(), validate));
            }
            if (!cleared) {  // The first value replaces the default; later ones accumulate.
              field->clear();
              cleared = true;
            }
            for (std::string& part : parts) field->push_back(std::move(part));
            return absl::OkStatus();
          });
}

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  for (auto& f : flags_) {
    if (f->name == name) return f.get();
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  for (const auto& f : flags_) {
    if (f->name == name) return f.get();
  }
  return nullptr;
}

bool FlagSet::WasSet(absl::string_view name) const {
  const Flag* f = Find(name);
  return f != nullptr && f->set;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args);
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  std::vector<std::string> config_files;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    absl::string_view body = arg;
    body.remove_prefix(arg[1] == '-' ? 2 : 1);
    std::string name;
    std::optional<std::string> value;
    size_t eq = body.find('=');
    if (eq == absl::string_view::npos) {
      name = std::string(body);
    } else {
      name = std::string(body.substr(0, eq));
      value = std::string(body.substr(eq + 1));
    }
    if (name == "help" || name == "h") return absl::CancelledError(Usage());
    if (name == "config") {
      if (!value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a file");
        value = args[++i];
      }
      config_files.push_back(*value);
      continue;
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !value && absl::StartsWith(name, "no")) {
      Flag* negated = Find(absl::string_view(name).substr(2));
      if (negated != nullptr && negated->is_bool) {
        flag = negated;
        value = "false";
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    RETURN_IF_ERROR(flag->setter(*value));
    flag->set = true;
    flag->from_command_line = true;
  }
  for (const std::string& path : config_files) RETURN_IF_ERROR(ApplyConfigFile(path));
  return positional;
}

absl::Status FlagSet::ApplyConfigFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("config file ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": not a regular file",
                                                   S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("config file ", path, ": ", std::strerror(errno)));
  }
  // Read at most one byte past the limit: the size stat gave may have grown since.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("config file ", path, ": read failed"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": larger than ", kMaxConfigFileBytes, " bytes"));
  }
  return ApplyConfigText(text, path);
}

absl::Status FlagSet::ApplyConfigText(absl::string_view text, absl::string_view origin) {
  std::set<std::string> seen;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    std::string where = absl::StrCat(origin, ":", line_number);
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected \"name = value\""));
    }
    std::string name(absl::StripAsciiWhitespace(line.substr(0, eq)));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    } else {
      size_t hash = value.find(" #");
      if (hash != absl::string_view::npos) {
        value = absl::StripAsciiWhitespace(value.substr(0, hash));
      }
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown option \"", name, "\""));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": option \"", name, "\" repeated"));
    }
    if (flag->from_command_line) continue;  // The command line wins.
    absl::Status s = flag->setter(value);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    flag->set = true;
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " [flags]\n", description_, "\n\nflags:\n");
  absl::StrAppend(&out, "  --config FILE\n      read \"name = value\" lines; flags win\n");
  for (const auto& f : flags_) {
    absl::StrAppend(&out, "  --", f->name, f->is_bool ? "" : " VALUE", "  (default ",
                    f->default_text, ")\n      ", f->help, "\n");
  }
  return out;
}

}  // namespace cairn
