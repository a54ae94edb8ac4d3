#ifndef CAIRN_SERVICES_INFER_CACHE_CLIENT_ARENA_PINS_H_
#define CAIRN_SERVICES_INFER_CACHE_CLIENT_ARENA_PINS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/concurrency/mutex.h"
#include "services/infer/kernels/device_memory.h"

namespace cairn::infer {

// Page-locks the cache's mapped arena for a GPU backend's copies, in the steps the cache daemon
// names in its Welcome (docs/cache-protocol.md): the first step [0, first_step) up front, later
// steps of `step` bytes when a copy first touches them. The cache never places a region across
// a step boundary, so every copy of one region lies inside one registration (a copy straddling
// two registrations fails on CUDA). Registrations are released when this object goes, which
// must be before the arena is unmapped.
//
// A refused registration is logged and the step stays pageable: copies still work, slower.
//
// Thread-safe.
class ArenaPins {
 public:
  // `memory` null or host-visible: nothing is ever registered. `first_step` and `step` 0 mean
  // one registration of the whole arena.
  ArenaPins(DeviceMemory* memory, uint8_t* base, uint64_t size, uint64_t first_step, uint64_t step);
  ~ArenaPins();
  ArenaPins(const ArenaPins&) = delete;
  ArenaPins& operator=(const ArenaPins&) = delete;

  // Registers the step holding [offset, offset + length) if it is not yet registered.
  void EnsurePinned(uint64_t offset, uint64_t length) ABSL_LOCKS_EXCLUDED(mu_);

  // Steps registered so far (tests and logs).
  int registered_steps() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The step index of `offset` and its [begin, end).
  int StepOf(uint64_t offset) const;
  void StepRange(int step, uint64_t* begin, uint64_t* end) const;
  void Register(int step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeviceMemory* const memory_;
  uint8_t* const base_;
  const uint64_t size_;
  const uint64_t first_step_;
  const uint64_t step_;

  mutable Mutex mu_;
  // Per step: 0 not tried, 1 registered, 2 refused.
  std::vector<uint8_t> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_CACHE_CLIENT_ARENA_PINS_H_
