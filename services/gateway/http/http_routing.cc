#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/ip/address.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/http/verb.hpp"
#include "common/status/check.h"
#include "services/gateway/http/http_server.h"

// The HTTP layer's pieces that hold no connection: status payloads, listen addresses, API-key,
// Host and loopback checks, the route table. The server itself is in http_server.cc.

namespace cairn::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;

namespace {
constexpr char kHttpStatusPayload[] = "type.cairn.dev/http-status";
}  // namespace

absl::Status WithHttpStatus(absl::Status status, int http_status) {
  status.SetPayload(kHttpStatusPayload, absl::Cord(absl::StrCat(http_status)));
  return status;
}

int HttpStatusOf(const absl::Status& status) {
  absl::optional<absl::Cord> p = status.GetPayload(kHttpStatusPayload);
  int code = 0;
  if (!p.has_value() || !absl::SimpleAtoi(std::string(*p), &code)) return 0;
  return code;
}

absl::StatusOr<HttpListenAddress> ParseHttpListenAddress(absl::string_view listen) {
  size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", listen, "\" must be HOST:PORT"));
  }
  HttpListenAddress a;
  absl::string_view host = listen.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("listen address \"", listen, "\": missing ]"));
  }
  a.host = std::string(host);
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &a.port) || a.port < 0 || a.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", listen, "\" has no valid port"));
  }
  return a;
}

bool ApiKeyMatches(absl::string_view presented, const std::vector<std::string>& keys) {
  bool match = false;
  for (const std::string& key : keys) {
    // Constant time in the key's length: every byte is compared whatever the mismatch.
    unsigned char diff = presented.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) {
      unsigned char c = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
      diff |= c ^ static_cast<unsigned char>(key[i]);
    }
    match |= (diff == 0);
  }
  return match;
}

std::string BasicAuthPassword(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.size() <= 6 || !absl::EqualsIgnoreCase(authorization.substr(0, 6), "basic ")) {
    return "";
  }
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripAsciiWhitespace(authorization.substr(6)), &decoded)) {
    return "";
  }
  const size_t colon = decoded.find(':');
  return colon == std::string::npos ? "" : decoded.substr(colon + 1);
}

bool IsLoopbackHost(absl::string_view host) {
  host = absl::StripAsciiWhitespace(host);
  if (absl::StartsWith(host, "[")) {  // An IPv6 literal, maybe with a port.
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    const absl::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return false;
    return host.substr(1, close - 1) == "::1";
  }
  if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(std::string(host), ec);
  return !ec && address.is_v4() && address.is_loopback();
}

namespace {

// RFC 3986's reg-name characters (unreserved and sub-delims; '%' is checked apart).
bool IsRegNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("-._~!$&'()*+,;=").find(c) != absl::string_view::npos;
}

// RFC 3986's port: digits, perhaps none.
bool IsPort(absl::string_view port) {
  return std::all_of(port.begin(), port.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

bool IsValidHostValue(absl::string_view value) {
  // Optional whitespace (spaces and tabs only) around a field's value.
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return true;  // Allowed: a target without an authority.
  if (value[0] == '[') {
    // An IP literal: IPv6 (a zone's "%25" included) or IPvFuture, then an optional port.
    const size_t close = value.find(']');
    if (close == absl::string_view::npos || close == 1) return false;
    const absl::string_view inside = value.substr(1, close - 1);
    const bool literal = std::all_of(inside.begin(), inside.end(), [](char c) {
      return c == ':' || c == '%' || IsRegNameChar(c);
    });
    const absl::string_view rest = value.substr(close + 1);
    return literal && (rest.empty() || (rest[0] == ':' && IsPort(rest.substr(1))));
  }
  absl::string_view host = value;
  if (const size_t colon = value.find(':'); colon != absl::string_view::npos) {
    host = value.substr(0, colon);
    if (!IsPort(value.substr(colon + 1))) return false;  // A second ':' fails here too.
  }
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i] == '%') {  // A percent-encoded octet.
      if (i + 2 >= host.size() || !absl::ascii_isxdigit(static_cast<unsigned char>(host[i + 1])) ||
          !absl::ascii_isxdigit(static_cast<unsigned char>(host[i + 2]))) {
        return false;
      }
      i += 2;
    } else if (!IsRegNameChar(host[i])) {
      return false;
    }
  }
  return true;
}

absl::Status CheckHostHeader(const HttpRequest& header) {
  const size_t hosts = header.count(boost::beast::http::field::host);
  if (hosts > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request has ", hosts, " Host headers; send exactly one (RFC 9112 section 3.2)"));
  }
  if (hosts == 0 && header.version() >= 11) {
    return absl::InvalidArgumentError(
        "an HTTP/1.1 request must carry a Host header (RFC 9112 section 3.2), also with a "
        "target in absolute form");
  }
  if (hosts == 1) {
    const boost::beast::string_view raw = header[boost::beast::http::field::host];
    const absl::string_view value(raw.data(), raw.size());
    if (!IsValidHostValue(value)) {
      constexpr size_t kShown = 64;  // Of a value that may be long and hostile.
      return absl::InvalidArgumentError(
          absl::StrCat("the Host header \"", absl::CHexEscape(value.substr(0, kShown)),
                       value.size() > kShown ? "...\"" : "\"",
                       " is not a host with an optional port (RFC 9112 section 3.2)"));
    }
  }
  return absl::OkStatus();
}

bool IsLoopbackOrigin(absl::string_view origin) {
  origin = absl::StripAsciiWhitespace(origin);
  const size_t scheme_end = origin.find("://");
  if (scheme_end == absl::string_view::npos) return false;  // "null", or not an origin.
  const absl::string_view scheme = origin.substr(0, scheme_end);
  if (!absl::EqualsIgnoreCase(scheme, "http") && !absl::EqualsIgnoreCase(scheme, "https")) {
    return false;
  }
  const absl::string_view host = origin.substr(scheme_end + 3);
  // An origin is scheme://host[:port], nothing more.
  if (host.find_first_of("/?#@") != absl::string_view::npos) return false;
  return IsLoopbackHost(host);
}

std::string RequestTargetPath(absl::string_view target, std::optional<std::string>* authority) {
  if (authority != nullptr) authority->reset();
  for (const absl::string_view scheme : {"http://", "https://"}) {
    if (!absl::StartsWithIgnoreCase(target, scheme)) continue;
    target.remove_prefix(scheme.size());
    const size_t path = target.find_first_of("/?");
    if (authority != nullptr) *authority = std::string(target.substr(0, path));
    target = path == absl::string_view::npos ? absl::string_view() : target.substr(path);
    break;
  }
  target = target.substr(0, target.find('?'));
  return target.empty() ? "/" : std::string(target);
}

bool IsIdentityCoding(absl::string_view coding) {
  coding = absl::StripAsciiWhitespace(coding);
  return coding.empty() || absl::EqualsIgnoreCase(coding, "identity");
}

absl::Status CheckTransferCoding(const HttpRequest& header) {
  const auto codings = header.equal_range(boost::beast::http::field::transfer_encoding);
  for (auto field = codings.first; field != codings.second; ++field) {
    const absl::string_view coding(field->value().data(), field->value().size());
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(coding), "chunked")) continue;
    return WithHttpStatus(absl::UnimplementedError(absl::StrCat(
                              "Transfer-Encoding ", coding,
                              " is not supported; send the body with Content-Length or chunked")),
                          501);
  }
  return absl::OkStatus();
}

void Router::Add(HttpVerb verb, std::string path, RouteOptions options, HttpHandler handler) {
  // GW1: deny by default; only the health check and the root probe may go without a key.
  CAIRN_CHECK(!options.public_route || path == "/health" || path == "/");
  routes_.push_back(Route{verb, std::move(path), options, std::move(handler)});
}

void Router::AddPrefix(HttpVerb verb, std::string prefix, RouteOptions options,
                       HttpHandler handler) {
  CAIRN_CHECK(!options.public_route && absl::EndsWith(prefix, "/"));
  routes_.push_back(Route{verb, std::move(prefix), options, std::move(handler), /*prefix=*/true});
}

namespace {

bool Serves(const Router::Route& r, absl::string_view path) {
  return r.prefix ? absl::StartsWith(path, r.path) : r.path == path;
}

}  // namespace

const Router::Route* Router::Find(HttpVerb verb, absl::string_view path, bool* path_known) const {
  *path_known = false;
  const Route* found = nullptr;
  const Route* get = nullptr;  // HEAD's fallback.
  for (const Route& r : routes_) {
    if (!Serves(r, path)) continue;
    *path_known = true;
    // An exact route wins over a prefix route of the same verb.
    if (r.verb == verb && (found == nullptr || found->prefix)) found = &r;
    if (r.verb == HttpVerb::get && (get == nullptr || get->prefix)) get = &r;
  }
  if (found == nullptr && verb == HttpVerb::head) found = get;
  return found;
}

std::string Router::AllowedMethods(absl::string_view path) const {
  std::vector<HttpVerb> verbs;
  for (const Route& r : routes_) {
    if (Serves(r, path) && std::find(verbs.begin(), verbs.end(), r.verb) == verbs.end()) {
      verbs.push_back(r.verb);
    }
  }
  const bool get = std::find(verbs.begin(), verbs.end(), HttpVerb::get) != verbs.end();
  if (get && std::find(verbs.begin(), verbs.end(), HttpVerb::head) == verbs.end()) {
    verbs.push_back(HttpVerb::head);
  }
  std::string allowed;
  for (HttpVerb v : verbs) {
    absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", std::string(beast::http::to_string(v)));
  }
  return allowed;
}

bool RequestHasApiKey(const HttpRequest& header, bool basic, const std::vector<std::string>& keys) {
  namespace http = boost::beast::http;
  // Any credential the request presents may be the key: Anthropic's SDKs send both headers
  // where both of their variables are set, and only one of them need be this server's key.
  auto auth = header.find(http::field::authorization);
  if (auth != header.end()) {
    absl::string_view v(auth->value().data(), auth->value().size());
    absl::string_view presented;
    std::string password;
    if (v.size() > 7 && absl::EqualsIgnoreCase(v.substr(0, 7), "bearer ")) {
      presented = absl::StripAsciiWhitespace(v.substr(7));
    } else if (basic) {
      password = BasicAuthPassword(v);
      presented = password;
    }
    if (!presented.empty() && ApiKeyMatches(presented, keys)) return true;
  }
  auto x = header.find("x-api-key");  // Anthropic clients send this header.
  if (x == header.end()) return false;
  const absl::string_view presented(x->value().data(), x->value().size());
  return !presented.empty() && ApiKeyMatches(presented, keys);
}

bool HeaderAbsentOr(const HttpRequest& header, boost::beast::http::field field,
                    bool (*ok)(absl::string_view)) {
  auto it = header.find(field);
  return it == header.end() || ok(absl::string_view(it->value().data(), it->value().size()));
}

}  // namespace cairn::gateway
