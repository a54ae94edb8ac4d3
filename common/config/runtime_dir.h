#ifndef CAIRN_COMMON_CONFIG_RUNTIME_DIR_H_
#define CAIRN_COMMON_CONFIG_RUNTIME_DIR_H_

#include <string>

namespace cairn {

// The folder where the daemons put their default sockets: systemd's $RUNTIME_DIRECTORY, else
// $XDG_RUNTIME_DIR/cairn, else /tmp/cairn-UID. Every daemon picks the same one, so their default
// addresses meet.
std::string DefaultRuntimeDir();

}  // namespace cairn

#endif  // CAIRN_COMMON_CONFIG_RUNTIME_DIR_H_
