#ifndef CAIRN_TESTS_FUZZ_FUZZ_TARGET_H_
#define CAIRN_TESTS_FUZZ_FUZZ_TARGET_H_

// One fuzz target per parser (docs: tests/README.md, "Fuzzing"). A target's body is written
// once with CAIRN_FUZZ_TARGET(Name) and built two ways:
//   - in the fuzz build (preset `fuzz`, CAIRN_FUZZ_ENGINE defined) it is libFuzzer's entry
//     point, one executable per target (cairn_fuzz_<name>);
//   - in every other build it is the function cairn::fuzz::Fuzz<Name>, through which
//     fuzz_replay_test.cc replays the committed seeds and regression inputs in every CI run.
// A target returns 0 and must never crash, leak or trip a sanitizer; a broken property
// (for example, an invalid gateway body answered with a 5xx) aborts through CAIRN_CHECK.

#include <cstddef>
#include <cstdint>

namespace cairn::fuzz {

int FuzzTokenizer(const uint8_t* data, size_t size);
int FuzzChatTemplate(const uint8_t* data, size_t size);
int FuzzSafetensors(const uint8_t* data, size_t size);
int FuzzModelConfig(const uint8_t* data, size_t size);
int FuzzDiskFormat(const uint8_t* data, size_t size);
int FuzzDiskRecovery(const uint8_t* data, size_t size);
int FuzzTrace(const uint8_t* data, size_t size);
int FuzzGatewayRequest(const uint8_t* data, size_t size);
int FuzzCacheRpc(const uint8_t* data, size_t size);
int FuzzInferRpc(const uint8_t* data, size_t size);
int FuzzJsonSchema(const uint8_t* data, size_t size);
int FuzzSampler(const uint8_t* data, size_t size);

}  // namespace cairn::fuzz

#ifdef CAIRN_FUZZ_ENGINE
#define CAIRN_FUZZ_TARGET(Name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#else
#define CAIRN_FUZZ_TARGET(Name) int cairn::fuzz::Fuzz##Name(const uint8_t* data, size_t size)
#endif

#endif  // CAIRN_TESTS_FUZZ_FUZZ_TARGET_H_
