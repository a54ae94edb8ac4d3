#ifndef CAIRN_SERVICES_INFER_KERNELS_SCRATCH_ARENA_H_
#define CAIRN_SERVICES_INFER_KERNELS_SCRATCH_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/device_memory.h"

namespace cairn::infer {

// The temporaries of a forward pass (activations, routing lists) in a backend's DeviceMemory,
// taken and given back stack-wise: a Frame marks the top of the stack and gives back what was
// taken after it when it ends.
//
// Memory is bump-allocated from blocks kept between passes; EndPass() merges the blocks a pass
// needed into one for the next pass, so a steady state allocates nothing (allocating device
// memory synchronises the device; allocating host memory costs page faults and the zero fill
// DeviceMemory promises, which made up a quarter of a CPU prefill when every Take allocated).
// Temporaries are not cleared: every user writes before reading. Builds with assertions fill
// each host-visible Take with 0xff bytes (a NaN in every float lane, -1 in every integer) so
// that a read before a write shows in the tests instead of reading a previous pass's values.
//
// Host-visible blocks are resident memory, so they shrink: after kTrimAfterPasses passes in a
// row that each used under a quarter of the held block, the block goes and the next pass
// allocates what the last one needed. A long prefill followed by decoding keeps a decode-sized
// block; prefill passes that alternate with decode steps keep theirs. Device blocks never
// shrink (a free would synchronise the device; device memory is budgeted at start-up).
//
// Memory given back may still be read by device work already enqueued; that is safe because the
// backend runs its kernels and its memory's copies in one order (one stream).
//
// Thread-compatible; must not outlive `memory`.
class ScratchArena {
 public:
  explicit ScratchArena(DeviceMemory* memory)
      : memory_(memory), host_visible_(memory->host_visible()) {}
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // `n` elements of T, at a multiple of kAlignment bytes from the start of a block (which is
  // aligned as the memory aligns allocations); nullptr for n == 0. ResourceExhausted when
  // the memory has no room, InvalidArgument for n < 0.
  template <typename T>
  absl::StatusOr<T*> Take(int64_t n) {
    absl::StatusOr<void*> p = TakeBytes(n < 0 ? -1 : n * static_cast<int64_t>(sizeof(T)));
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }

  // The top of the stack.
  struct Mark {
    size_t blocks = 0;
    size_t current = 0;
    int64_t used = 0;
  };

  // Gives back everything taken after its construction when destroyed. Frames nest.
  class Frame {
   public:
    explicit Frame(ScratchArena& arena) : arena_(arena), mark_(arena.Top()) {}
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;
    ~Frame() { arena_.Release(mark_); }

   private:
    ScratchArena& arena_;
    const Mark mark_;
  };

  // Ends a pass, with no frame open: device blocks are merged into one before the next pass.
  void EndPass();

  // Bytes held between passes.
  int64_t held_bytes() const;

  static constexpr int64_t kAlignment = 256;
  // The smallest device block: small passes share one block however they begin.
  static constexpr int64_t kMinBlockBytes = int64_t{1} << 20;
  // Host-visible memory: passes in a row using under a quarter of the held block before the
  // block shrinks to what the last pass used.
  static constexpr int kTrimAfterPasses = 8;

 private:
  struct Block {
    DeviceBuffer buffer;
    int64_t used = 0;
  };
  absl::StatusOr<void*> TakeBytes(int64_t bytes);
  Mark Top() const;
  void Release(const Mark& mark);

  // Bytes in use now: every block before current_ counts whole (its unused tail was skipped).
  int64_t InUse() const;

  DeviceMemory* const memory_;
  const bool host_visible_;    // Blocks shrink; Takes are poisoned when assertions are on.
  std::vector<Block> blocks_;  // Blocks after current_ are empty.
  size_t current_ = 0;
  int64_t next_block_bytes_ = 0;  // The merged size EndPass asked for.
  int64_t pass_peak_ = 0;         // The most bytes in use at once in this pass.
  int small_passes_ = 0;          // Passes in a row that used under a quarter of the block.
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_SCRATCH_ARENA_H_
