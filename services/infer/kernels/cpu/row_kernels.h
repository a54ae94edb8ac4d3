#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "services/infer/kernels/kernel_backend.h"

// The inner loops of CpuKernelBackend's row-invariant product and weight widening, in one
// portable form and x86 forms chosen at run time. Every form of RowProducts gives the same bits:
// a dot product over k has sixteen interleaved partial sums (lane j sums the products at
// i = j mod 16), folded pairwise 16 -> 8 -> 4 -> 2 -> 1, then the remainder in order; each
// product is added to its sum with a fused multiply-add (rounded once), in every form and in
// either weight layout (row-major rows, or row tiles).
// Weights are widened to fp32 exactly before they are multiplied.
namespace cairn::infer::cpu {

enum class Isa { kPortable, kAvx2, kAvx512 };

// The widest form this processor runs: kAvx512 with AVX-512F, kAvx2 with AVX2, FMA and F16C.
Isa BestIsa();
bool IsaSupported(Isa isa);
absl::string_view IsaName(Isa isa);

// y[r * ldy + j] = (y[r * ldy + j] +) x[r] . w_rows[j] for r < m, j < count: rows of `x` have
// stride `ldx`; each of the `count` weight rows has `k` elements of `type`.
void RowProducts(Isa isa, WeightType type, const float* x, int64_t m, int64_t ldx,
                 const void* const* w_rows, int64_t count, int64_t k, float* y, int64_t ldy,
                 bool accumulate);

// As RowProducts over `count` rows of a part in the row-tile layout (row_tiles.h) with k
// columns, from the tile at `tiles` on: y[r * ldy + j] = (y +) x[r] . row j. Gives the same
// bits as RowProducts over the same rows row-major. The AVX-512 kernel asks for a tile's weights
// ahead of use when a group's input rows (up to 8 rows of k floats) take at least
// `prefetch_min_input_bytes` (kTilePrefetchAlways: always; kTilePrefetchNever: never); where
// it pays depends on the processor (DefaultTilePrefetchMinInputBytes). Never changes bits.
void RowTileProducts(Isa isa, WeightType type, const float* x, int64_t m, int64_t ldx,
                     const void* tiles, int64_t count, int64_t k, float* y, int64_t ldy,
                     bool accumulate, int64_t prefetch_min_input_bytes);
inline constexpr int64_t kTilePrefetchAlways = 0;
inline constexpr int64_t kTilePrefetchNever = -1;

// RowTileProducts' default prefetch threshold: always (row_kernels.cc has the measurements).
int64_t DefaultTilePrefetchMinInputBytes();

// Rows [first, first + count) of a part in the row-tile layout with k columns, widened to fp32
// into `count` row-major rows at dst.
void WidenTileRows(Isa isa, WeightType type, const void* part, int64_t first, int64_t count,
                   int64_t k, float* dst);

// dst[i] = src[i] widened to fp32, for `n` elements of `type`.
void Widen(Isa isa, WeightType type, const void* src, int64_t n, float* dst);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_
