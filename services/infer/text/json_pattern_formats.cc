// FindStringFormat: the `format`s this grammar implements, each written as a pattern.
#include <string_view>

#include "services/infer/text/json_pattern.h"

namespace cairn::infer::text::json {
namespace {

// The formats, written as patterns. RFC 3339 (date-time, date, time, duration: its Appendix A),
// RFC 1123 and RFC 5890 (hostname), RFC 5321 (email, a subset), RFC 2673 / RFC 4291 in
// RFC 3986's ABNF (ipv4, ipv6), RFC 4122 (uuid, pydantic's uuid1 to uuid8), RFC 6901
// (json-pointer), RFC 3986 (uri, uri-reference) and RFC 3987 (iri, iri-reference).
// Years divisible by 4 and not 100, or by 400 (0000 included).
#define CAIRN_LEAP_YEAR \
  "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
#define CAIRN_DATE                                                                            \
  "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]" \
  "[0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" CAIRN_LEAP_YEAR "-02-29)"
#define CAIRN_OFFSET "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
// A leap second only where it is 23:59:60 in UTC without converting (see the README).
#define CAIRN_TIME                                                           \
  "(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?" CAIRN_OFFSET \
  "|23:59:60(?:\\.[0-9]+)?(?:[Zz]|[+-]00:00))"
#define CAIRN_DUR_TIME "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
#define CAIRN_DUR_DATE "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
// A DNS label of 1 to 63 letters, digits and hyphens, neither first nor last a hyphen, and not
// "--" in its third and fourth places (RFC 5891 keeps those for A-labels, "xn--", whose
// Punycode a pattern cannot check).
#define CAIRN_LABEL                                                                    \
  "(?:[A-Za-z0-9](?:[A-Za-z0-9-]?[A-Za-z0-9])?|[A-Za-z0-9][A-Za-z0-9-]{2}[A-Za-z0-9]|" \
  "[A-Za-z0-9][A-Za-z0-9-](?:[A-Za-z0-9][A-Za-z0-9-]|-[A-Za-z0-9])[A-Za-z0-9-]{0,58}"  \
  "[A-Za-z0-9])"
#define CAIRN_ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define CAIRN_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define CAIRN_IPV4 "(?:" CAIRN_OCTET "\\.){3}" CAIRN_OCTET
#define CAIRN_H16 "[0-9A-Fa-f]{1,4}"
#define CAIRN_LS32 "(?:" CAIRN_H16 ":" CAIRN_H16 "|" CAIRN_IPV4 ")"
#define CAIRN_H16S(n) "(?:(?:" CAIRN_H16 ":){0," #n "}" CAIRN_H16 ")?::"
#define CAIRN_IPV6                                                                              \
  "(?:(?:" CAIRN_H16 ":){6}" CAIRN_LS32 "|::(?:" CAIRN_H16 ":){5}" CAIRN_LS32 "|(?:" CAIRN_H16  \
  ")?::(?:" CAIRN_H16 ":){4}" CAIRN_LS32                                                        \
  "|" CAIRN_H16S(1) "(?:" CAIRN_H16 ":){3}" CAIRN_LS32                                          \
                    "|" CAIRN_H16S(2) "(?:" CAIRN_H16 ":){2}" CAIRN_LS32 "|" CAIRN_H16S(3)      \
                        CAIRN_H16 ":" CAIRN_LS32 "|" CAIRN_H16S(4) CAIRN_LS32 "|" CAIRN_H16S(5) \
                            CAIRN_H16 "|" CAIRN_H16S(6) ")"
#define CAIRN_REFERENCE "(?:/(?:[^~/]|~[01])*)*"
// RFC 3986's URI and URI-reference; with `u` the ucschar code points of RFC 3987 in
// `unreserved` and with `p` iprivate in the query: IRI and IRI-reference. `u` and `p` are
// class contents (empty for URIs).
#define CAIRN_PCT "%[0-9A-Fa-f]{2}"
#define CAIRN_UNRESERVED(u) "A-Za-z0-9._~" u  // '-' is added last in each class.
#define CAIRN_SUB "!$&'()*+,;="
#define CAIRN_SEGMENT(u, more, q) "(?:[" CAIRN_UNRESERVED(u) CAIRN_SUB more "-]|" CAIRN_PCT ")" q
#define CAIRN_AUTHORITY(u)                                                                \
  "(?:" CAIRN_SEGMENT(u, ":", "*") "@)?(?:\\[(?:" CAIRN_IPV6                              \
                                   "|[Vv][0-9A-Fa-f]+\\.[" CAIRN_UNRESERVED("") CAIRN_SUB \
      ":-]+)\\]|" CAIRN_SEGMENT(u, "", "*") ")(?::[0-9]*)?"
#define CAIRN_QUERY(u, p) \
  "(?:\\?" CAIRN_SEGMENT(u, ":@/?" p, "*") ")?(?:#" CAIRN_SEGMENT(u, ":@/?", "*") ")?"
#define CAIRN_PATHS(u)                                                                \
  "//" CAIRN_AUTHORITY(u) "(?:/" CAIRN_SEGMENT(u, ":@", "*") ")*|/(?:" CAIRN_SEGMENT( \
      u, ":@", "+") "(?:/" CAIRN_SEGMENT(u, ":@", "*") ")*)?"
#define CAIRN_URI(u, p)                                           \
  "[A-Za-z][A-Za-z0-9+.-]*:(?:" CAIRN_PATHS(u) "|" CAIRN_SEGMENT( \
      u, ":@", "+") "(?:/" CAIRN_SEGMENT(u, ":@", "*") ")*|)" CAIRN_QUERY(u, p)
#define CAIRN_RELATIVE(u, p)                                                \
  "(?:" CAIRN_PATHS(u) "|" CAIRN_SEGMENT(u, "@", "+") "(?:/" CAIRN_SEGMENT( \
      u, ":@", "*") ")*|)" CAIRN_QUERY(u, p)
#define CAIRN_UCSCHAR                                                                    \
  "\\u{A0}-\\u{D7FF}\\u{F900}-\\u{FDCF}\\u{FDF0}-\\u{FFEF}\\u{10000}-\\u{1FFFD}"         \
  "\\u{20000}-\\u{2FFFD}\\u{30000}-\\u{3FFFD}\\u{40000}-\\u{4FFFD}\\u{50000}-\\u{5FFFD}" \
  "\\u{60000}-\\u{6FFFD}\\u{70000}-\\u{7FFFD}\\u{80000}-\\u{8FFFD}\\u{90000}-\\u{9FFFD}" \
  "\\u{A0000}-\\u{AFFFD}\\u{B0000}-\\u{BFFFD}\\u{C0000}-\\u{CFFFD}\\u{D0000}-\\u{DFFFD}" \
  "\\u{E1000}-\\u{EFFFD}"
#define CAIRN_IPRIVATE "\\u{E000}-\\u{F8FF}\\u{F0000}-\\u{FFFFD}\\u{100000}-\\u{10FFFD}"
#define CAIRN_UUID(v) \
  "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-" v "[0-9A-Fa-f]{3}-[89ABab][0-9A-Fa-f]{3}-[0-9A-Fa-f]{12}$"

constexpr StringFormat kFormats[] = {
    {"date-time", "^" CAIRN_DATE "[Tt]" CAIRN_TIME "$"},
    {"date", "^" CAIRN_DATE "$"},
    {"time", "^" CAIRN_TIME "$"},
    {"duration", "^P(?:" CAIRN_DUR_DATE "(?:" CAIRN_DUR_TIME ")?|" CAIRN_DUR_TIME "|[0-9]+W)$"},
    // RFC 5321's limits: 64 octets before the @, 254 in all (a path holds 256 with its <>).
    {"email",
     "^(?=[^@]{1,64}@)" CAIRN_ATEXT "+(?:\\." CAIRN_ATEXT "+)*@(?:" CAIRN_LABEL
     "\\.)+[A-Za-z]{2,63}$",
     254},
    {"hostname", "^" CAIRN_LABEL "(?:\\." CAIRN_LABEL ")*$", 253},
    {"ipv4", "^" CAIRN_IPV4 "$"},
    {"ipv6", "^" CAIRN_IPV6 "$"},
    {"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"},
    // pydantic's UUID1 to UUID8: the version digit, and RFC 4122's variant (10xx), without
    // which Python's uuid.UUID has no version.
    {"uuid1", CAIRN_UUID("1")},
    {"uuid2", CAIRN_UUID("2")},
    {"uuid3", CAIRN_UUID("3")},
    {"uuid4", CAIRN_UUID("4")},
    {"uuid5", CAIRN_UUID("5")},
    {"uuid6", CAIRN_UUID("6")},
    {"uuid7", CAIRN_UUID("7")},
    {"uuid8", CAIRN_UUID("8")},
    {"json-pointer", "^" CAIRN_REFERENCE "$"},
    {"relative-json-pointer", "^(?:0|[1-9][0-9]*)(?:#|" CAIRN_REFERENCE ")$"},
    {"uri", "^" CAIRN_URI("", "") "$"},
    {"uri-reference", "^(?:" CAIRN_URI("", "") "|" CAIRN_RELATIVE("", "") ")$"},
    {"iri", "^" CAIRN_URI(CAIRN_UCSCHAR, CAIRN_IPRIVATE) "$"},
    {"iri-reference", "^(?:" CAIRN_URI(CAIRN_UCSCHAR, CAIRN_IPRIVATE) "|" CAIRN_RELATIVE(
                          CAIRN_UCSCHAR, CAIRN_IPRIVATE) ")$"},
};

#undef CAIRN_LEAP_YEAR
#undef CAIRN_DATE
#undef CAIRN_OFFSET
#undef CAIRN_TIME
#undef CAIRN_DUR_TIME
#undef CAIRN_DUR_DATE
#undef CAIRN_LABEL
#undef CAIRN_ATEXT
#undef CAIRN_OCTET
#undef CAIRN_IPV4
#undef CAIRN_H16
#undef CAIRN_LS32
#undef CAIRN_H16S
#undef CAIRN_REFERENCE
#undef CAIRN_UUID
#undef CAIRN_IPV6
#undef CAIRN_PCT
#undef CAIRN_UNRESERVED
#undef CAIRN_SUB
#undef CAIRN_SEGMENT
#undef CAIRN_AUTHORITY
#undef CAIRN_QUERY
#undef CAIRN_PATHS
#undef CAIRN_URI
#undef CAIRN_RELATIVE
#undef CAIRN_UCSCHAR
#undef CAIRN_IPRIVATE

}  // namespace

const StringFormat* FindStringFormat(std::string_view name) {
  for (const StringFormat& f : kFormats) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace cairn::infer::text::json
