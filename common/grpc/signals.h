#ifndef CAIRN_COMMON_GRPC_SIGNALS_H_
#define CAIRN_COMMON_GRPC_SIGNALS_H_

namespace cairn {

// Blocks SIGTERM and SIGINT in the calling thread (and threads it starts later). Call first
// thing in main(), before any thread starts.
void BlockTerminationSignals();
// Waits for SIGTERM or SIGINT (blocked by BlockTerminationSignals) and returns its number.
int WaitForTerminationSignal();

}  // namespace cairn

#endif  // CAIRN_COMMON_GRPC_SIGNALS_H_
