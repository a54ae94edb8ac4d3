// HipKernelBackend's MoE layer (MoeExperts): the device tables of a layer's experts, the choice
// of path (the decode path's grouped launches, the prefill path's grouped GEMM, or the default),
// the shared expert folded into the decode launches, and the launches of each path. The rest of
// the backend is in hip_kernel_backend.cc; its products in hip_backend_products.cc.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {
namespace {

// A MoE call's routing (ids and weights) and sort buffers for `picks` picks over `experts`
// experts (`sizes`: MoeSortSizesFor's), taken from `scratch`.
struct MoeRouteBuffers {
  int32_t* ids;
  float* weights;
  hip::MoeSortBuffers sort;
};
absl::StatusOr<MoeRouteBuffers> TakeRouteBuffers(ScratchArena& scratch, int64_t picks, int experts,
                                                 const hip::MoeSortSizes& sizes) {
  MoeRouteBuffers r{};
  ASSIGN_OR_RETURN(r.ids, scratch.Take<int32_t>(picks));
  ASSIGN_OR_RETURN(r.weights, scratch.Take<float>(picks));
  hip::MoeSortBuffers& b = r.sort;
  ASSIGN_OR_RETURN(b.hist, scratch.Take<int32_t>(sizes.hist_ints));
  ASSIGN_OR_RETURN(b.base, scratch.Take<int32_t>(sizes.hist_ints));
  ASSIGN_OR_RETURN(b.rank, scratch.Take<int32_t>(picks));
  ASSIGN_OR_RETURN(b.offsets, scratch.Take<int32_t>(experts));
  ASSIGN_OR_RETURN(b.tiles, scratch.Take<hip::MoeTile>(sizes.max_tiles));
  ASSIGN_OR_RETURN(b.num_tiles, scratch.Take<int32_t>(1));
  ASSIGN_OR_RETURN(b.sorted_picks, scratch.Take<int32_t>(picks));
  ASSIGN_OR_RETURN(b.slot_of_pick, scratch.Take<int32_t>(picks));
  return r;
}

}  // namespace

const HipKernelBackend::MoeTable* HipKernelBackend::MoeTableFor(const WeightMatrix* w, int experts,
                                                                int64_t rows, int64_t cols) {
  // Value-initialised (padding included), so tables compare as bytes.
  std::vector<hip::MoeExpertParts> host(static_cast<size_t>(experts));
  bool aligned = true;
  for (int e = 0; e < experts; ++e) {
    const WeightMatrix& m = w[e];
    if (m.type != WeightType::kBF16 || m.cols != cols || m.num_parts < 1 ||
        m.num_parts > hip::kMoeMaxParts || m.rows() != rows) {
      return nullptr;
    }
    hip::MoeExpertParts& p = host[static_cast<size_t>(e)];
    int64_t end = 0;
    for (int i = 0; i < m.num_parts; ++i) {
      p.data[i] = static_cast<const uint16_t*>(m.parts[i].data);
      end += m.parts[i].rows;
      p.end[i] = end;
      aligned = aligned && reinterpret_cast<uintptr_t>(m.parts[i].data) % 16 == 0;
    }
    p.count = m.num_parts;
  }
  const size_t bytes = host.size() * sizeof(hip::MoeExpertParts);
  auto it = moe_tables_.find(w);
  if (it != moe_tables_.end() && it->second.host.size() == host.size() &&
      std::memcmp(it->second.host.data(), host.data(), bytes) == 0) {
    return &it->second;
  }
  // A new array, or one whose matrices changed: (re)make its table. Only at the first call for
  // a model's layer, so its wait for the upload is not a decode step's.
  MoeTable table;
  absl::StatusOr<DeviceBuffer> device = Allocate(static_cast<int64_t>(bytes));
  if (!Keep(device.status())) return nullptr;
  table.device = *std::move(device);
  if (!Keep(Upload(table.device.data(), host.data(), static_cast<int64_t>(bytes)))) return nullptr;
  table.host = std::move(host);
  table.aligned = aligned;
  MoeTable& kept = moe_tables_[w];
  kept = std::move(table);
  return &kept;
}

bool HipKernelBackend::MoeFusesGateUpSilu(int64_t width) const {
  return fuse_gate_up_silu_ && width % 8 == 0;
}

hip::MoeRouting HipKernelBackend::MoeRoutingFor() const {
  if (!options_.moe_block_route) return hip::MoeRouting::kThread;
  return moe_kernels_ == 1 ? hip::MoeRouting::kWarp : hip::MoeRouting::kBlock;
}

absl::Status HipKernelBackend::MoeExperts(const MoeExpertsArgs& args, ScratchArena& scratch) {
  // The norm's rounded copy of x kept for the router product, if it runs first; cleared after.
  if (!Enter(/*keep_rounded=*/true)) return error_;
  if (!args.StridesValid()) return PackedMoeArgs(args, scratch).status();  // Its InvalidArgument.
  const int64_t picks = args.tokens * args.top_k;
  const bool routable = options_.grouped_moe && picks > 0 && args.experts >= 1 &&
                        args.experts <= hip::MoeMaxExperts() && args.top_k >= 1 &&
                        args.top_k <= hip::MoeMaxTopK() && args.top_k <= args.experts &&
                        picks <= 0x7fffffff;
  const bool device_path =
      routable && args.row_invariant && options_.mma_rows && hip::MatMulRowsMmaSupported();
  // Prefill: the grouped bf16 GEMM, for widths its 16-byte copies take.
  const bool gemm_path = routable && !args.row_invariant && grouped_moe_prefill_ &&
                         options_.bf16_gemm_inputs && hip::MoeGemmSupported() &&
                         args.hidden % 8 == 0 && args.width % 8 == 0;
  const MoeTable* gate_up = nullptr;
  const MoeTable* down = nullptr;
  if (device_path || gemm_path) {
    gate_up = MoeTableFor(args.gate_up, args.experts, 2 * args.width, args.hidden);
    down = gate_up == nullptr ? nullptr
                              : MoeTableFor(args.down, args.experts, args.hidden, args.width);
    if (!error_.ok()) return error_;
  }
  const bool on_device =
      gate_up != nullptr && down != nullptr && (!gemm_path || (gate_up->aligned && down->aligned));
  // The warp routing and the wide sum read logits and gates rows apart where they are; other
  // ways take copies in rows of their own.
  const bool strided = on_device && moe_kernels_ == 1 && MoeRoutingFor() == hip::MoeRouting::kWarp;
  // The router product first, unless the decode path's one launch may take it
  // (moe_router_inside; MoeExpertsOnDevice decides).
  const bool router_kept = args.router != nullptr && strided && !gemm_path && moe_router_inside_;
  if (args.router != nullptr && !router_kept) {
    RETURN_IF_ERROR(MoeRouter(args));
    if (!error_.ok()) return error_;
  }
  rounded_ = {};  // What follows writes memory.
  // The shared expert in the decode path's grouped launches (fold_shared_expert) where it has
  // the routed experts' width and the gate/up launch is the fused one; else first, on its own.
  MoeShared shared;
  if (strided && !gemm_path && fold_shared_expert_ && args.shared_gate_up != nullptr &&
      args.shared_down != nullptr && args.shared_width == args.width &&
      MoeFusesGateUpSilu(args.width)) {
    shared.gate_up = MoeTableFor(args.shared_gate_up, 1, 2 * args.width, args.hidden);
    shared.down = shared.gate_up == nullptr
                      ? nullptr
                      : MoeTableFor(args.shared_down, 1, args.hidden, args.width);
    if (!error_.ok()) return error_;
  }
  ScratchArena::Frame frame(scratch);
  MoeExpertsArgs a = args;
  if (!router_kept) a.router = nullptr;
  if (shared.gate_up == nullptr || shared.down == nullptr) {
    shared = MoeShared();
    RETURN_IF_ERROR(MoeSharedExpert(args, scratch));
    if (!Enter()) return error_;
  }
  a.shared_gate_up = nullptr;
  a.shared_down = nullptr;
  // The shared expert's gate and the residual in the launch that adds the routed experts where
  // that is the wide sum (moe_kernels 1); else around the routed experts, as
  // KernelBackend::MoeExperts applies them.
  if (strided) return MoeExpertsOnDevice(a, *gate_up, *down, shared, gemm_path, scratch);
  ASSIGN_OR_RETURN(const MoeExpertsArgs packed, PackedMoeArgs(a, scratch));
  if (!Enter()) return error_;
  if (on_device && moe_kernels_ == 1) {
    return MoeExpertsOnDevice(packed, *gate_up, *down, shared, gemm_path, scratch);
  }
  MoeExpertsArgs plain = packed;
  plain.out_gate = nullptr;
  plain.residual = nullptr;
  if (packed.out_gate != nullptr) SigmoidScaleRows(a.out, a.tokens, a.hidden, packed.out_gate);
  RETURN_IF_ERROR(on_device ? MoeExpertsOnDevice(plain, *gate_up, *down, shared, gemm_path, scratch)
                            : KernelBackend::MoeRoutedExperts(plain, scratch));
  if (a.residual != nullptr) {
    AddScaledRows(a.out, a.tokens, a.hidden, nullptr, nullptr, a.residual);
  }
  return Enter() ? absl::OkStatus() : error_;
}

absl::Status HipKernelBackend::EnsureMoeCounters(int64_t counters) {
  if (counters <= moe_counter_capacity_) return absl::OkStatus();
  const int64_t capacity = std::max<int64_t>(counters, kMoeCountersMinCapacity);
  moe_counters_ = DeviceBuffer();  // Freed first (the device's launches are done with it).
  moe_counter_capacity_ = 0;
  ASSIGN_OR_RETURN(moe_counters_, Allocate(2 * capacity * static_cast<int64_t>(sizeof(uint32_t))));
  moe_counter_capacity_ = capacity;
  moe_counter_parity_ = 0;
  moe_taken_counters_at_ = -1;
  return absl::OkStatus();
}

absl::Status HipKernelBackend::MoeExpertsOnDevice(const MoeExpertsArgs& a, const MoeTable& gate_up,
                                                  const MoeTable& down, const MoeShared& shared,
                                                  bool gemm_path, ScratchArena& scratch) {
  const bool fused = MoeFusesGateUpSilu(a.width);
  if ((shared.gate_up != nullptr || shared.down != nullptr) &&
      (gemm_path || !fused || shared.gate_up == nullptr || shared.down == nullptr)) {
    // MoeExperts folds only what these launches take; out would go unwritten.
    return absl::InternalError("MoE shared expert handed to a path that does not fold it");
  }
  if (a.router != nullptr && gemm_path) {
    RETURN_IF_ERROR(MoeRouter(a));
    if (!Enter()) return error_;
  }
  if (gemm_path) return MoeExpertsGemm(a, gate_up, down, scratch);
  const int64_t picks = a.tokens * a.top_k;
  ScratchArena::Frame frame(scratch);
  const hip::MoeSortSizes sizes = hip::MoeSortSizesFor(picks, a.experts, hip::MoeTileRows());
  ASSIGN_OR_RETURN(const MoeRouteBuffers route, TakeRouteBuffers(scratch, picks, a.experts, sizes));
  int32_t* const ids = route.ids;
  float* const weights = route.weights;
  const hip::MoeSortBuffers& b = route.sort;
  // The gate/up product and SiLU-mul in one launch where the width allows (fuse_gate_up_silu).
  ASSIGN_OR_RETURN(float* gu, scratch.Take<float>(fused ? 0 : picks * 2 * a.width));
  ASSIGN_OR_RETURN(float* act, scratch.Take<float>(picks * a.width));
  ASSIGN_OR_RETURN(float* ys, scratch.Take<float>(picks * a.hidden));
  const auto* gate_up_table = static_cast<const hip::MoeExpertParts*>(gate_up.device.data());
  const auto* down_table = static_cast<const hip::MoeExpertParts*>(down.device.data());
  // The shared expert's rows in the same two launches (MoeExperts folds it only with `fused`):
  // its activations in rows of their own, its output straight into out, which the sum reads.
  hip::MoeSharedRows shared_up, shared_down;
  bool gate_up_aligned = gate_up.aligned;
  bool down_aligned = down.aligned;
  if (shared.gate_up != nullptr) {
    ASSIGN_OR_RETURN(float* shared_act, scratch.Take<float>(a.tokens * a.width));
    shared_up = {static_cast<const hip::MoeExpertParts*>(shared.gate_up->device.data()),
                 a.x,
                 a.hidden,
                 shared_act,
                 a.width,
                 a.tokens};
    shared_down = {static_cast<const hip::MoeExpertParts*>(shared.down->device.data()),
                   shared_act,
                   a.width,
                   a.out,
                   a.hidden,
                   a.tokens};
    gate_up_aligned = gate_up_aligned && shared.gate_up->aligned;
    down_aligned = down_aligned && shared.down->aligned;
  }
  // Who does the grouped products' work (moe_product_waves; the same bits).
  // (moe_stream_products 3 falls back to the grouped launches where its launch does not fit.)
  const hip::MoeLongWarps long_warps{
      .multiprocessors = multiprocessors_,
      .waves = moe_product_waves_,
      .stream = moe_stream_products_ == 1 || moe_stream_products_ == 2};
  hip::MoeLongWarps down_warps = long_warps;
  down_warps.stream = moe_stream_products_ == 2;
  const auto gate_up_and_silu = [&] {
    if (fused) {
      return Check(
          hip::MoeRowsMmaSiluMul(a.x, a.hidden, b.sorted_picks, a.top_k, b.tiles, b.num_tiles,
                                 sizes.max_tiles, gate_up_table, gate_up_aligned, a.width, a.hidden,
                                 act, mma_rows_bf16_inputs_, compute_, shared_up, long_warps),
          "moe gate/up and silu mul launch");
    }
    return Check(hip::MoeRowsMma(a.x, a.hidden, b.sorted_picks, a.top_k, b.tiles, b.num_tiles,
                                 sizes.max_tiles, gate_up_table, gate_up.aligned, 2 * a.width,
                                 a.hidden, gu, 2 * a.width, mma_rows_bf16_inputs_, compute_, {},
                                 long_warps),
                 "moe gate/up launch") &&
           Check(hip::SiluMul(gu, 2 * a.width, gu + a.width, 2 * a.width, picks, a.width, act,
                              nullptr, compute_),
                 "moe silu mul launch");
  };
  // Both products in one launch (moe_stream_products 3) where it takes the call.
  hip::MoeLayerStreamArgs one;
  bool one_launch = false;
  // The one launch writes the shared expert's rows into out while other blocks may still read
  // x: it takes only calls where the two do not overlap (the grouped launches' down launch ran
  // after every read of x).
  const uintptr_t x_begin = reinterpret_cast<uintptr_t>(a.x);
  const uintptr_t out_begin = reinterpret_cast<uintptr_t>(a.out);
  const uintptr_t rows_bytes = static_cast<uintptr_t>(a.tokens * a.hidden) * sizeof(float);
  const bool apart = shared.gate_up == nullptr || out_begin + rows_bytes <= x_begin ||
                     x_begin + rows_bytes <= out_begin;
  // Modes 4 and 5: the routing and sort inside the launch too, and 5 the sum (the wide sum
  // only, moe_kernels 1), where the launch takes them; else their own launches around it.
  bool route_inside = false;
  bool sum_inside = false;
  if (moe_stream_products_ >= 3 && a.tokens <= moe_one_launch_max_tokens_ && fused &&
      gate_up_aligned && down_aligned && apart && hip::MoeLayerStreamSupported()) {
    route_inside =
        moe_stream_products_ >= 4 && hip::MoeLayerStreamRoutes(a.tokens, a.experts, a.top_k);
    sum_inside = route_inside && moe_stream_products_ == 5 && moe_kernels_ == 1 &&
                 hip::MoeLayerStreamSums(a.hidden, ys, a.out, a.residual);
    if (!Keep(EnsureMoeCounters(MoeCountersFor(sizes.max_tiles, a.tokens)))) return error_;
    auto* const base = static_cast<uint32_t*>(moe_counters_.data());
    one = {.tiles = b.tiles,
           .num_tiles = b.num_tiles,
           .max_tiles = sizes.max_tiles,
           .sorted_picks = b.sorted_picks,
           .top_k = a.top_k,
           .x = a.x,
           .ldx = a.hidden,
           .gate_up = gate_up_table,
           .down = down_table,
           .hidden = a.hidden,
           .width = a.width,
           .act = act,
           .ys = ys,
           .shared_up = shared_up,
           .shared_down = shared_down,
           .bf16_inputs = mma_rows_bf16_inputs_,
           .multiprocessors = multiprocessors_,
           .cooperative = moe_one_launch_cooperative_,
           .static_sixteenths = moe_one_launch_static_sixteenths_,
           .compact_route = moe_compact_route_,
           .counters = base + moe_counter_parity_ * moe_counter_capacity_,
           .next_counters = base + (1 - moe_counter_parity_) * moe_counter_capacity_,
           .counter_capacity = moe_counter_capacity_};
    if (route_inside) {
      one.tiles = nullptr;
      one.num_tiles = nullptr;
      one.sorted_picks = nullptr;
      one.logits = a.logits;
      one.logits_ld = a.LogitsLd();
      one.tokens = a.tokens;
      one.experts = a.experts;
      one.tile_rows = hip::MoeTileRows();
      one.renormalise = a.renormalise;
      one.ids = ids;
      one.weights = weights;
      one.slot_of_pick = b.slot_of_pick;
    }
    if (moe_layer_trace_ != nullptr && moe_layer_traced_ < moe_layer_trace_launches_) {
      one.trace = moe_layer_trace_ +
                  moe_layer_traced_ * multiprocessors_ * int64_t{hip::kMoeLayerTracePoints};
      one.trace_route_twice = moe_layer_trace_twice_;
    }
    if (sum_inside) {
      one.out = a.out;
      one.out_gate = a.out_gate;
      one.out_gate_ld = a.OutGateLd();
      one.residual = a.residual;
    }
    one_launch = true;
  }
  // The router product inside moe_stream_products 5's one launch where it routes there and the
  // router's table takes the launch's copies; else its own launch first (and if the one launch
  // then declines the call, before the launches that replace it). A row range of a larger
  // matrix (whole_rows) cuts k by that matrix's rows: its own launch, which knows them.
  bool router_inside = false;
  if (a.router != nullptr && moe_router_inside_ && moe_stream_products_ == 5 && one_launch &&
      route_inside && a.router_logits == a.logits && a.router->whole_rows <= 0) {
    RETURN_IF_ERROR(CheckMoeRouter(a));  // As MoeRouter checks the product it runs.
    const MoeTable* table = MoeTableFor(a.router, 1, a.router->rows(), a.hidden);
    if (!error_.ok()) return error_;
    if (table != nullptr && table->aligned) {
      one.router = static_cast<const hip::MoeExpertParts*>(table->device.data());
      one.router_rows = a.router->rows();
      one.router_out = a.router_logits;
      router_inside = true;
    }
  }
  if (a.router != nullptr && !router_inside) {
    RETURN_IF_ERROR(MoeRouter(a));
    if (!Enter()) return error_;
  }
  const auto route_and_sort = [&] {
    return Check(
        hip::MoeRouteAndSort(a.logits, a.LogitsLd(), a.tokens, a.experts, a.top_k, a.renormalise,
                             MoeRoutingFor(), hip::MoeTileRows(), ids, weights, b, compute_),
        "moe route and sort launch");
  };
  // The one launch where it takes the call (what it leaves out around it); else the grouped
  // launches, with the routing before them.
  bool launched = false;
  if (!route_inside && !route_and_sort()) return error_;
  if (one_launch) {
    hipError_t e = hip::MoeLayerStream(one, compute_);
    if (e == hipErrorNotSupported && router_inside) {
      // Declined perhaps for the router's shape alone: its own launch, then the one launch
      // without it.
      RETURN_IF_ERROR(MoeRouter(a));
      if (!Enter()) return error_;
      router_inside = false;
      one.router = nullptr;
      one.router_rows = 0;
      one.router_out = nullptr;
      e = hip::MoeLayerStream(one, compute_);
    }
    if (e == hipSuccess) {
      moe_taken_counters_at_ = moe_counter_parity_ * moe_counter_capacity_ + sizes.max_tiles +
                               (one.shared_up.rows + 7) / 8 + 2;
      moe_counter_parity_ ^= 1;
      launched = true;
      moe_one_launch_ran_ = true;
      if (router_inside) ++moe_router_inside_launches_;
      if (one.trace != nullptr) ++moe_layer_traced_;
    } else if (e != hipErrorNotSupported) {
      Check(e, "moe one-launch products");
      return error_;
    }
  }
  if (!launched) {
    if ((route_inside && !route_and_sort()) || !gate_up_and_silu() ||
        !Check(hip::MoeRowsMma(act, a.width, nullptr, a.top_k, b.tiles, b.num_tiles,
                               sizes.max_tiles, down_table, down_aligned, a.hidden, a.width, ys,
                               a.hidden, mma_rows_bf16_inputs_, compute_, shared_down, down_warps),
               "moe down launch")) {
      return error_;
    }
  }
  if ((!launched || !sum_inside) &&
      !Check(hip::MoeCombine(ys, ids, weights, b.slot_of_pick, a.tokens, a.top_k, a.hidden, a.out,
                             compute_, moe_kernels_ == 1, a.out_gate, a.residual, a.OutGateLd()),
             "moe combine launch")) {
    return error_;
  }
  return absl::OkStatus();
}

const hip::MoeExpertMaps* HipKernelBackend::MoeMapsFor(const MoeTable& table, int64_t cols,
                                                       int box_rows, int64_t second_start) {
  const auto made = table.maps.find(box_rows);
  if (made != table.maps.end()) return static_cast<const hip::MoeExpertMaps*>(made->second.data());
  if (box_rows < 1 || !table.aligned || !hip::TensorMapsSupported()) return nullptr;
  DeviceBuffer& kept = table.maps[box_rows];  // Empty unless every map below is made.
  std::vector<hip::MoeExpertMaps> host(table.host.size());
  for (size_t e = 0; e < host.size(); ++e) {
    const hip::MoeExpertParts& parts = table.host[e];
    int64_t start = 0;
    for (int p = 0; p < parts.count; ++p) {
      const int64_t rows = parts.end[p] - start;
      // A box never spans two parts: every boundary between parts falls on a box, counted from
      // row 0 below second_start and from second_start above it (the up rows' boxes).
      const int64_t boundary = parts.end[p];
      const int64_t from = boundary <= second_start ? boundary : boundary - second_start;
      if ((p + 1 < parts.count && from % box_rows != 0) ||
          hip::EncodeBf16TensorMap(&host[e].part[p], parts.data[p], rows, cols, cols, box_rows,
                                   hip::kSwizzledBoxCols, true) != hipSuccess) {
        return nullptr;
      }
      start = parts.end[p];
    }
  }
  const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(hip::MoeExpertMaps));
  absl::StatusOr<DeviceBuffer> device = Allocate(bytes);
  if (!Keep(device.status())) return nullptr;
  if (!Keep(Upload(device->data(), host.data(), bytes))) return nullptr;
  kept = *std::move(device);
  return static_cast<const hip::MoeExpertMaps*>(kept.data());
}

absl::Status HipKernelBackend::MoeExpertsGemm(const MoeExpertsArgs& a, const MoeTable& gate_up,
                                              const MoeTable& down, ScratchArena& scratch) {
  const int64_t picks = a.tokens * a.top_k;
  ScratchArena::Frame frame(scratch);
  // The warpgroup GEMMs (moe_gemm_wgmma) where built: larger tiles, SiLU-mul in the gate/up
  // launch; else MoeGemmBf16 with MoeSiluMulBf16 between its launches.
  const bool wgmma = moe_gemm_wgmma_ && hip::MoeGemmWgmmaSupported();
  // The producer-fed kernels (moe_gemm_tma) where both tables take tensor maps.
  const hip::MoeExpertMaps* gate_up_maps = nullptr;
  const hip::MoeExpertMaps* down_maps = nullptr;
  if (wgmma && hip::MoeGemmTmaTileRows(moe_gemm_tma_) > 0 && hip::MoeGemmTmaSupported()) {
    gate_up_maps =
        MoeMapsFor(gate_up, a.hidden, hip::MoeGemmTmaBoxRows(moe_gemm_tma_, true), a.width);
    down_maps = gate_up_maps == nullptr
                    ? nullptr
                    : MoeMapsFor(down, a.width, hip::MoeGemmTmaBoxRows(moe_gemm_tma_, false), 0);
    if (!error_.ok()) return error_;
  }
  const bool tma = down_maps != nullptr;
  const int tile_rows = tma     ? hip::MoeGemmTmaTileRows(moe_gemm_tma_)
                        : wgmma ? hip::MoeGemmWgmmaTileRows(moe_wgmma_groups_)
                                : hip::MoeGemmTileRows();
  const hip::MoeSortSizes sizes = hip::MoeSortSizesFor(picks, a.experts, tile_rows);
  ASSIGN_OR_RETURN(const MoeRouteBuffers route, TakeRouteBuffers(scratch, picks, a.experts, sizes));
  int32_t* const ids = route.ids;
  float* const weights = route.weights;
  const hip::MoeSortBuffers& b = route.sort;
  // The inputs in bf16: the tokens' rows (wgmma: its gate/up launch reads each pick's token
  // row), else the picks' rows in slot order. Then in slot order: gate/up (not with wgmma), the
  // activations in bf16, the outputs.
  ASSIGN_OR_RETURN(uint16_t * xs, scratch.Take<uint16_t>((wgmma ? a.tokens : picks) * a.hidden));
  float* gu = nullptr;
  if (!wgmma) {
    ASSIGN_OR_RETURN(gu, scratch.Take<float>(picks * 2 * a.width));
  }
  ASSIGN_OR_RETURN(uint16_t * act, scratch.Take<uint16_t>(picks * a.width));
  ASSIGN_OR_RETURN(float* ys, scratch.Take<float>(picks * a.hidden));
  const auto* gate_up_table = static_cast<const hip::MoeExpertParts*>(gate_up.device.data());
  const auto* down_table = static_cast<const hip::MoeExpertParts*>(down.device.data());
  const auto products = [&]() {
    if (tma) {
      return Check(hip::RoundRowsToBf16(a.x, a.tokens, a.hidden, a.hidden, xs, a.hidden, compute_),
                   "moe round inputs launch") &&
             Check(hip::MoeGemmTmaSiluMul(xs, a.hidden, b.sorted_picks, a.top_k, b.tiles,
                                          b.num_tiles, sizes.max_tiles, gate_up_table, gate_up_maps,
                                          a.width, a.hidden, act, moe_gemm_tma_, compute_),
                   "moe gate/up gemm launch") &&
             Check(hip::MoeGemmTma(act, a.width, b.tiles, b.num_tiles, sizes.max_tiles, down_table,
                                   down_maps, a.hidden, a.width, ys, a.hidden, moe_gemm_tma_,
                                   compute_),
                   "moe down gemm launch");
    }
    if (wgmma) {
      return Check(hip::RoundRowsToBf16(a.x, a.tokens, a.hidden, a.hidden, xs, a.hidden, compute_),
                   "moe round inputs launch") &&
             Check(hip::MoeGemmWgmmaSiluMul(xs, a.hidden, b.sorted_picks, a.top_k, b.tiles,
                                            b.num_tiles, sizes.max_tiles, gate_up_table,
                                            gate_up.aligned, a.width, a.hidden, act,
                                            moe_wgmma_groups_, compute_),
                   "moe gate/up gemm launch") &&
             Check(hip::MoeGemmWgmma(act, a.width, b.tiles, b.num_tiles, sizes.max_tiles,
                                     down_table, down.aligned, a.hidden, a.width, ys, a.hidden,
                                     moe_wgmma_groups_, compute_),
                   "moe down gemm launch");
    }
    return Check(hip::MoeGatherBf16(a.x, a.hidden, b.sorted_picks, a.top_k, b.tiles, b.num_tiles,
                                    sizes.max_tiles, a.hidden, xs, a.hidden, tile_rows, compute_),
                 "moe gather launch") &&
           Check(
               hip::MoeGemmBf16(xs, a.hidden, b.tiles, b.num_tiles, sizes.max_tiles, gate_up_table,
                                gate_up.aligned, 2 * a.width, a.hidden, gu, 2 * a.width, compute_),
               "moe gate/up gemm launch") &&
           Check(hip::MoeSiluMulBf16(gu, picks, a.width, act, compute_), "moe silu mul launch") &&
           Check(hip::MoeGemmBf16(act, a.width, b.tiles, b.num_tiles, sizes.max_tiles, down_table,
                                  down.aligned, a.hidden, a.width, ys, a.hidden, compute_),
                 "moe down gemm launch");
  };
  if (!Check(
          hip::MoeRouteAndSort(a.logits, a.LogitsLd(), a.tokens, a.experts, a.top_k, a.renormalise,
                               MoeRoutingFor(), tile_rows, ids, weights, b, compute_),
          "moe route and sort launch") ||
      !products() ||
      !Check(hip::MoeCombine(ys, ids, weights, b.slot_of_pick, a.tokens, a.top_k, a.hidden, a.out,
                             compute_, moe_kernels_ == 1, a.out_gate, a.residual, a.OutGateLd()),
             "moe combine launch")) {
    return error_;
  }
  return absl::OkStatus();
}

absl::Status HipKernelBackend::SetMoeOneLaunchStaticSixteenthsForTest(int sixteenths) {
  if (sixteenths < 0 || sixteenths > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_one_launch_static_sixteenths must be 0 to 16, got ", sixteenths));
  }
  moe_one_launch_static_sixteenths_ = sixteenths;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HipKernelBackend::MoeOneLaunchTakenLoadsForTest() {
  if (moe_taken_counters_at_ < 0) return int64_t{0};
  uint32_t taken[2] = {0, 0};
  RETURN_IF_ERROR(
      Download(taken, static_cast<const uint32_t*>(moe_counters_.data()) + moe_taken_counters_at_,
               sizeof(taken)));
  return int64_t{taken[0]} + int64_t{taken[1]};
}

}  // namespace cairn::infer
