#ifndef CAIRN_COMMON_GRPC_PEER_ADDRESS_H_
#define CAIRN_COMMON_GRPC_PEER_ADDRESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cairn {

// Returns OK if `target` is an address of a peer daemon that NewLocalChannel can dial, in one of
// the forms gRPC reads:
//
//   unix:PATH, unix:///ABSOLUTE_PATH   a Unix socket (a relative PATH is from the working folder)
//   unix-abstract:NAME                 a socket in Linux's abstract namespace
//   ipv4:ADDR:PORT, ipv6:[ADDR]:PORT   an IP literal, no name lookup (also after ///)
//   dns:HOST:PORT, dns:///HOST:PORT    a host name looked up through DNS
//   HOST:PORT, [ADDR]:PORT             the same as dns:///HOST:PORT
//
// Otherwise returns InvalidArgument naming the problem: an empty target, path or name; a missing,
// non-numeric or out-of-range PORT (it must be in [1, 65535]; gRPC would take 443 for a missing
// one and resolve "garbage" for ever); a control character, or a space anywhere but inside a
// socket path or name (a file name may hold one); in a path or name, a character gRPC reads as
// URI syntax (',' separates a list of addresses, '?' and '#' end the path, '%' starts an escape);
// a path or name longer than a socket address holds (107 bytes); an authority after // (a DNS
// server, or unix://PATH with a relative PATH); a list of addresses; an IPv6 address without
// brackets; an unknown scheme.
absl::Status ValidatePeerAddress(absl::string_view target);

// Like ValidatePeerAddress, but an empty `target` is OK: a peer that is optional and left out
// (cairn-infer's and cairn-gateway's --cache).
absl::Status ValidateOptionalPeerAddress(absl::string_view target);

}  // namespace cairn

#endif  // CAIRN_COMMON_GRPC_PEER_ADDRESS_H_
