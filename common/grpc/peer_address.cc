#include "common/grpc/peer_address.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cairn {
namespace {

// sockaddr_un.sun_path holds 108 bytes, the terminator included.
constexpr size_t kMaxUnixPathBytes = 107;
constexpr char kWant[] = "(want unix:PATH or HOST:PORT)";

absl::Status Refuse(absl::string_view target, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("peer address \"", absl::CHexEscape(target), "\" ", why));
}

// A URI scheme as RFC 3986 spells it: a letter, then letters, digits, '+', '-' or '.'.
bool IsScheme(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

bool IsKnownScheme(absl::string_view s) {
  return s == "unix" || s == "unix-abstract" || s == "ipv4" || s == "ipv6" || s == "dns";
}

bool IsIpv4(absl::string_view text) {
  in_addr addr;
  return ::inet_pton(AF_INET, std::string(text).c_str(), &addr) == 1;
}

bool IsHostName(absl::string_view host) {
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

// An IPv6 literal, with an optional zone ("fe80::1%eth0"), as gRPC parses it.
bool IsIpv6(absl::string_view text) {
  const size_t percent = text.find('%');
  if (percent != absl::string_view::npos) {
    const absl::string_view zone = text.substr(percent + 1);
    if (zone.empty() || !IsHostName(zone)) return false;
  }
  in6_addr addr;
  return ::inet_pton(AF_INET6, std::string(text.substr(0, percent)).c_str(), &addr) == 1;
}

absl::Status ValidatePort(absl::string_view target, absl::string_view port) {
  if (port.empty()) return Refuse(target, absl::StrCat("has no port ", kWant));
  for (char c : port) {
    if (!absl::ascii_isdigit(c)) {
      return Refuse(target,
                    absl::StrCat("has port \"", absl::CHexEscape(port), "\", not a number"));
    }
  }
  absl::string_view digits = port;
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  int value = 0;
  if (digits.size() > 5 || !absl::SimpleAtoi(digits, &value) || value < 1 || value > 65535) {
    return Refuse(target, absl::StrCat("has port ", port, ", outside 1-65535"));
  }
  return absl::OkStatus();
}

// Splits "HOST:PORT" or "[ADDR]:PORT" into `*host` (brackets kept) and `*port`.
absl::Status SplitHostPort(absl::string_view target, absl::string_view host_port,
                           absl::string_view* host, absl::string_view* port) {
  if (host_port.empty()) return Refuse(target, absl::StrCat("names no host ", kWant));
  if (host_port[0] == '[') {
    const size_t close = host_port.find(']');
    if (close == absl::string_view::npos) return Refuse(target, "has '[' without ']'");
    *host = host_port.substr(0, close + 1);
    absl::string_view rest = host_port.substr(close + 1);
    if (!absl::ConsumePrefix(&rest, ":")) {
      return Refuse(target, absl::StrCat("has no port after ']' ", kWant));
    }
    *port = rest;
    return absl::OkStatus();
  }
  const size_t colon = host_port.rfind(':');
  if (colon == absl::string_view::npos) {
    return Refuse(target, absl::StrCat("has no port ", kWant));
  }
  *host = host_port.substr(0, colon);
  *port = host_port.substr(colon + 1);
  return absl::OkStatus();
}

// "[ADDR]" must hold an IPv6 literal; anything else a host name or an IPv4 literal.
absl::Status ValidateHost(absl::string_view target, absl::string_view host) {
  if (host.empty()) return Refuse(target, "names no host");
  if (host[0] == '[') {
    if (!IsIpv6(host.substr(1, host.size() - 2))) {
      return Refuse(target, absl::StrCat("has ", host, ", not an IPv6 address in brackets"));
    }
    return absl::OkStatus();
  }
  if (absl::StrContains(host, ':')) {
    if (IsIpv6(host)) {
      return Refuse(target, "has an IPv6 address without brackets (want [ADDR]:PORT)");
    }
    const absl::string_view first = host.substr(0, host.find(':'));
    if (IsScheme(first)) {
      return Refuse(target, absl::StrCat("has unknown scheme \"", first, "\""));
    }
  }
  if (!IsHostName(host)) {
    return Refuse(target, absl::StrCat("has host \"", absl::CHexEscape(host),
                                       "\", neither a host name nor an IP address"));
  }
  return absl::OkStatus();
}

// HOST:PORT after dns: or without a scheme.
absl::Status ValidateDnsTarget(absl::string_view target, absl::string_view host_port) {
  absl::string_view host;
  absl::string_view port;
  if (absl::Status s = SplitHostPort(target, host_port, &host, &port); !s.ok()) return s;
  if (absl::Status s = ValidateHost(target, host); !s.ok()) return s;
  return ValidatePort(target, port);
}

// ADDR:PORT after ipv4: or [ADDR]:PORT after ipv6:.
absl::Status ValidateIpTarget(absl::string_view target, absl::string_view host_port, bool v6) {
  absl::string_view host;
  absl::string_view port;
  if (absl::Status s = SplitHostPort(target, host_port, &host, &port); !s.ok()) return s;
  if (v6) {
    if (host.empty() || host[0] != '[') {
      return Refuse(target, "wants the address in brackets (ipv6:[ADDR]:PORT)");
    }
    if (!IsIpv6(host.substr(1, host.size() - 2))) {
      return Refuse(target, absl::StrCat("has ", host, ", not an IPv6 address"));
    }
  } else if (!IsIpv4(host)) {
    return Refuse(target,
                  absl::StrCat("has \"", absl::CHexEscape(host), "\", not an IPv4 address"));
  }
  return ValidatePort(target, port);
}

// The socket path after unix: or the name after unix-abstract:.
absl::Status ValidateSocketName(absl::string_view target, absl::string_view name,
                                absl::string_view what) {
  if (name.empty()) return Refuse(target, absl::StrCat("has an empty ", what));
  if (name.front() == ' ' || name.back() == ' ') {
    return Refuse(target, absl::StrCat("has a ", what, " that begins or ends with a space"));
  }
  for (char c : name) {
    const char* why = nullptr;
    switch (c) {
      case ',':
        why = "which gRPC reads as a list of addresses";
        break;
      case '?':
      case '#':
        why = "where gRPC ends the path";
        break;
      case '%':
        why = "which gRPC decodes as an escape";
        break;
      default:
        continue;
    }
    return Refuse(target, absl::StrCat("has '", std::string(1, c), "' in its ", what, ", ", why));
  }
  if (name.size() > kMaxUnixPathBytes) {
    return Refuse(target, absl::StrCat("has a ", what, " longer than ", kMaxUnixPathBytes,
                                       " bytes (a socket address holds no more)"));
  }
  return absl::OkStatus();
}

// Takes the "//" of "SCHEME:///..." off `*rest`; an authority between // and / is refused.
absl::Status ConsumeEmptyAuthority(absl::string_view target, absl::string_view scheme,
                                   absl::string_view* rest) {
  if (!absl::ConsumePrefix(rest, "//")) return absl::OkStatus();
  if (!rest->empty() && !absl::StartsWith(*rest, "/")) {
    return Refuse(target, absl::StrCat("has an authority after ", scheme, "://, which Cairn does ",
                                       "not take (want ", scheme, ":///... or ", scheme, ":...)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePeerAddress(absl::string_view target) {
  if (target.empty()) return absl::InvalidArgumentError("peer address is empty");
  for (char c : target) {
    if (absl::ascii_iscntrl(c)) return Refuse(target, "holds a control character");
  }
  if (target.front() == ' ' || target.back() == ' ') {
    return Refuse(target, "begins or ends with a space");
  }

  absl::string_view rest = target;
  if (absl::ConsumePrefix(&rest, "unix:")) {
    // unix:///PATH is an absolute PATH; unix://NAME/... would make NAME an authority.
    if (absl::Status s = ConsumeEmptyAuthority(target, "unix", &rest); !s.ok()) return s;
    return ValidateSocketName(target, rest, "unix socket path");
  }
  if (absl::ConsumePrefix(&rest, "unix-abstract:")) {
    if (absl::StartsWith(rest, "//")) {
      return Refuse(target, "has // after unix-abstract:, which gRPC reads as an authority");
    }
    return ValidateSocketName(target, rest, "abstract socket name");
  }
  if (absl::ConsumePrefix(&rest, "ipv4:") || absl::ConsumePrefix(&rest, "ipv6:")) {
    const bool v6 = absl::StartsWith(target, "ipv6:");
    if (absl::Status s = ConsumeEmptyAuthority(target, v6 ? "ipv6" : "ipv4", &rest); !s.ok()) {
      return s;
    }
    absl::ConsumePrefix(&rest, "/");
    if (absl::StrContains(rest, ',')) {
      return Refuse(target, "lists several addresses (Cairn dials one)");
    }
    return ValidateIpTarget(target, rest, v6);
  }
  if (absl::ConsumePrefix(&rest, "dns:")) {
    if (absl::Status s = ConsumeEmptyAuthority(target, "dns", &rest); !s.ok()) return s;
    absl::ConsumePrefix(&rest, "/");
    return ValidateDnsTarget(target, rest);
  }

  // No scheme of ours: "SCHEME:/..." names one gRPC does not know (or "UNIX:" in capitals), and
  // anything else is HOST:PORT.
  const size_t colon = target.find(':');
  if (colon != absl::string_view::npos && IsScheme(target.substr(0, colon)) &&
      absl::StartsWith(target.substr(colon + 1), "/")) {
    const absl::string_view scheme = target.substr(0, colon);
    const std::string lower = absl::AsciiStrToLower(scheme);
    if (IsKnownScheme(lower)) {
      return Refuse(target, absl::StrCat("has scheme \"", scheme,
                                         "\" (schemes are lower-case: ", lower, ":)"));
    }
    return Refuse(target, absl::StrCat("has unknown scheme \"", scheme, "\""));
  }
  return ValidateDnsTarget(target, target);
}

absl::Status ValidateOptionalPeerAddress(absl::string_view target) {
  return target.empty() ? absl::OkStatus() : ValidatePeerAddress(target);
}

}  // namespace cairn
