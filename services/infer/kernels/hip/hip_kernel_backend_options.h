#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_OPTIONS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_OPTIONS_H_

// HipKernelBackend's options (hip_kernel_backend.h): which kernels and launches it takes, each
// with what it measured. Every option that picks between kernels says whether their bits differ.

#include <cstdint>

#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {

struct HipKernelBackendOptions {
  int device = 0;  // Device ordinal.
  // Attention calls of at most this many query tokens take the split (decode) path.
  int64_t attention_decode_max_tokens = 16;
  // Keys per range of the split path; a multiple of the attention key tile (32). 128: a decode
  // step at 4K keys spreads over twice the blocks 256 gave (each block's tiles run one after
  // another, so fewer per block is less latency).
  int64_t attention_split_keys = 128;
  // The split path's blocks for calls of at most 8 query rows a kv head (hip::Attention
  // `decode_variant`; the same bits): 0, the tile kernel that loads a tile in four batches and
  // then computes it; 1, keys and values copied asynchronously, each overlapping the other's
  // arithmetic, a lane a key, branch-free loops (NVIDIA, 16-byte aligned rows; else 0); 2, as
  // 1, with blocks of 4 rows (a row a warp) for calls of at most 4 rows a kv head; 3 (default),
  // as 2, and also for calls whose blocks of 8 rows would be fewer than the multiprocessors (a
  // kv head's 5 to 8 rows then in two blocks); 4, variant 3's blocks streamed (a lane a key
  // scoring every row, keys through each warp's own ring of shared memory, values read once).
  // 5 gives other bits: the matrix units with bf16 operands, as bf16_attention's prefill (ranges
  // of at most 128 keys; else 3).
  int attention_decode_variant = 3;
  // Key ranges a decode block takes (hip::AttentionDecodeSpread; the same bits): 1, 2 or 4, or 0
  // (default) the most that leave attention_decode_min_waves waves of blocks on the device.
  int attention_decode_ranges_per_block = 0;
  int attention_decode_min_waves = 2;
  // Row-invariant attention (AttentionArgs::row_invariant) always takes the split path, this
  // many query tokens per launch (bounds its workspace).
  int64_t attention_invariant_group_tokens = 64;
  // Tokens whose chunk products the chunked delta rule prepares at once; bounds its workspace
  // (about v_heads * tokens * (chunk + dk + dv + 2) floats). Rounded down to whole chunks.
  int64_t delta_segment_tokens = 4096;
  // bf16 weight matrices stay bf16 in device memory (AcceptsWeightType(kBF16)): the row kernel
  // widens them in registers, the GEMM reads them as they are. Off, models widen them to fp32
  // at load time.
  bool bf16_weights = true;
  // How MatMulTransposedTyped multiplies bf16 weights. On: the input rows are rounded to bf16
  // (into the workspace) and the pinned bf16 GEMM runs on the matrix units with fp32
  // accumulation (GpuBlas::GemmNTBf16). Off: the weights are widened to fp32 in the workspace
  // and the fp32 GEMM runs, giving the bits of the fp32 backend over the widened weights.
  // Activations stay fp32 in memory either way; MatMulRowsTyped (decode) rounds its inputs by
  // mma_rows_bf16_inputs.
  bool bf16_gemm_inputs = true;
  // Prefill attention (calls above attention_decode_max_tokens, not row_invariant) on the
  // matrix units: q, k, v and the softmax weights rounded to bf16, fp32 accumulation
  // (hip::AttentionMma). Off, or where unsupported (AMD, head_dim > 256), the fp32 kernel.
  bool bf16_attention = true;
  // How the matrix-unit prefill attention lays out its blocks (hip::AttentionMma `variant`,
  // 0 to hip::kAttentionMmaVariants - 1; every variant gives the same bits): 0, 128 rows a
  // block with 32-bit fragment loads; 1, the same with ldmatrix loads, masks only where a tile
  // crosses a row's position and the output's rescale skipped when no maximum moved; 2,
  // variant 1's code with 64 rows a block and one key and one value buffer, two blocks a
  // multiprocessor; 3, variant 1's layout with the second half of a block's warps one phase
  // behind the first (its P V of a tile after the next barrier, so one half's softmax meets the
  // other's matrix instructions), one barrier a tile, row maxima by a tree and the keys and
  // values rounded by 16-byte kernels (a 32K dense prefill 2 % faster than with 1, 100K 5 %,
  // on the H200); 4, variant 2 with variant 3's maxima and rounding; 5, for head dimension 256
  // in sm_90a builds, variant 3's operations on the warpgroup instructions; 6 (the default),
  // variant 5 with its second warpgroup one phase behind the first as in variant 3 (one layer's
  // attention over a 32K dense prefill 16.6 ms against variant 5's 19.6 and variant 3's 34.4 on
  // the H200; other head dimensions and builds: variant 3 for both).
  int attention_mma_variant = 6;
  // MatMulRowsTyped over bf16 weights runs on the matrix units (hip::MatMulRowsMma: inputs split
  // exactly into three bf16 pieces, an order fixed by the shape, rows independent) where the
  // device has them (NVIDIA); off, or on AMD, the row kernel (and its bits) serves. The decode
  // products then read each weight once for up to 16 rows instead of once per row tile.
  bool mma_rows = true;
  // MatMulRowsMma (and the MoE layer's grouped decode products, MoeRowsMma) round each fp32
  // input to bf16 (nearest even) instead of splitting it exactly into three pieces: the rounding
  // bf16_gemm_inputs gives the prefill GEMMs, a third of the matrix instructions (decode products
  // of 16 rows were bound by them, not by the weights' bytes). Rows stay independent, so batch
  // and restore invariance hold either way; off, every decode input is exact (the arithmetic of
  // the "hip-f32-inputs" and pass-invariant numerics). The daemons set it to their
  // --gpu-bf16-inputs, except under pass-invariant numerics.
  bool mma_rows_bf16_inputs = true;
  // MatMulRowsMma calls of 9 to 16 rows (decode batches) run two tiles of 8 input rows (two
  // blocks read a weight tile, the second mostly from L2) instead of one tile of 16 that runs a
  // second set of instructions over reloaded inputs: 16 x 12288 in 0.061 ms instead of 0.082 on
  // the H200. The same bits (a row's arithmetic does not depend on its tile; tested). Calls of
  // more rows keep tiles of 16 (at 64 rows tiles of 8 measured 8 % slower).
  bool mma_rows_tiles_of_8 = true;
  // How MatMulRowsMma's tiles of 8 rows load (hip::MatMulRowsMma `variant`): 0, four steps of
  // k in flight a warp, two blocks a multiprocessor; 1, three steps and three blocks (80
  // registers a thread); -1, per call, whichever fills the multiprocessors better for its grid
  // (the 1.46 waves of the dense model's MLP gate+up and delta-rule in_proj at two blocks take
  // one at three), and calls of 9 to 16 rows take variant 2's tile where its grid gives every
  // multiprocessor a block within one wave of two, or spans many waves (MLP down, attention q
  // and o, delta-rule out, the lm head; not gate+up, in_proj, k, v); 2, calls of 9 to 16 rows
  // as one tile of 16 rows whose second set's inputs load with the weights (three steps in
  // flight; tiles_of_8 ignored for them), other calls as -1. The same bits (tested).
  int mma_rows_variant = -1;
  // Overlapped launches (hip::SetOverlappedLaunches; NVIDIA sm_90 and later): a kernel may be
  // scheduled while the stream's previous kernel finishes and waits for it before touching
  // memory, so no value changes. Process-wide: Create applies it to every backend's launches.
  bool overlapped_launches = true;
  // hip::SetEarlyRelease's mask (hip::EarlyReleaseKind bits; overlapped launches only): the
  // kernels of those kinds let the next kernel be scheduled once they have passed their own
  // wait. No value changes. Process-wide, as overlapped_launches. The norms by default: the
  // product after a norm then asks for its weights while the norm runs (forty-ninth round,
  // one-slot MoE steps: H100 1.44 -> 1.41 ms, H200 1.28 -> 1.25; dense on the H100 6.57 ->
  // 6.42); the other kinds measured no faster.
  unsigned early_release = hip::kReleaseNorms;
  // CopyRows by a kernel of this backend (hip::CopyRows), which overlapped launches cover, instead
  // of a 2-D memory copy on the compute stream (which they do not). The same bytes.
  bool copy_rows_kernel = true;
  // MatMulRowsMma calls of at least this many rows with bf16 inputs round their inputs into
  // the workspace first (one kernel) and load them as bf16: half the input bytes each warp
  // loads (at 16 rows twice the weights' bytes as fp32), the same bits. 0: never.
  int mma_rows_staged_min_rows = 0;
  // ... and whose weights (this call's columns) take at least this many bytes: the rounding is
  // a launch of its own, which costs more than it saves on small matrices.
  int64_t mma_rows_staged_min_bytes = 0;
  // MatMulRowsMma's warps ask the first this-many weights of each column's k segment into L2
  // before waiting for the previous kernel (hip::MatMulRowsMma `prefetch_k`; with overlapped
  // launches their fetch overlaps that kernel's end), in calls of at most
  // mma_rows_prefetch_max_rows rows. The same bits. 0: no prefetch. Measured on the H200
  // (2026-12-03, dense 9B-like decode, ms a step without / with 128): 1 slot 5.37-5.40 /
  // 5.33-5.38, 4 slots 5.94 / 5.89-5.90, 16 slots 8.57-8.61 / 8.64 (so not there); 512 was
  // slower at every slot count.
  int64_t mma_rows_prefetch_k = 128;
  int64_t mma_rows_prefetch_max_rows = 8;
  // RmsNorm, GatedRmsNorm(Heads), SiluMul (rows of a multiple of 8 values) and SigmoidMul write
  // their output rounded to bf16 as the products round their inputs (hip::RoundBf16), into a
  // buffer of the backend kept until the next operation other than a product or any write
  // through the memory: the row products with bf16 inputs (MatMulRowsTyped) and the bf16 GEMMs
  // (MatMulTransposedTyped) that read those rows load the rounded copy instead of rounding
  // their inputs again (at 16 rows each warp loads half the input bytes; a GEMM skips its
  // rounding launch). The same bits (a NaN's payload aside: a GEMM's own rounding keeps it, the
  // copy's is the canonical NaN; the output is NaN either way). Only outputs of at most
  // round_product_inputs_max_bytes (as bf16) are rounded; 0 turns it off.
  int64_t round_product_inputs_max_bytes = int64_t{64} << 20;
  // ... and of at least this many rows, which the row products read where they take at least
  // as many. Measured on the H200 (dense 9B-like decode, 2026-12-03): 16 slots 8.70 ms a step
  // against 8.79 without, but 1 and 4 slots 5.51 / 6.11 ms against 5.46 / 6.02.
  int64_t round_product_inputs_min_rows = 9;
  // MatMulRowsSiluMul (a SwiGLU's gate/up product and SiLU-mul in decode) in one launch of the
  // matrix-unit product, each warp taking 8 gate rows and their 8 up rows and writing the
  // activation (hip::MatMulRowsMmaSiluMul) instead of the gate/up rows and a SiLU-mul launch.
  // The same bits. Off, or where the kernel does not take the shape (k a multiple of 8, the
  // weights' parts and fp32 input rows 16-byte aligned), the default's two calls.
  bool fuse_gate_up_silu = true;
  // GatedDeltaStepBatch's decode steps (one token a sequence) in one launch that normalises q
  // and k and works out the gates inside the rule's blocks (hip::GatedDeltaRecurrentPrepared),
  // and its chunked calls on the matrix units with that done in their prepare kernels, instead
  // of the GdnGates and L2NormalizeTwo launches before them. The same bits. NVIDIA only.
  bool fuse_delta_inputs = true;
  // MatMulRowsCausalConv (a delta-rule layer's input projection and causal conv in decode, one
  // token a sequence) in one launch: the lane that writes a conv column's product value also
  // works out its conv and advances its state (hip::MatMulRowsMmaConv), instead of a conv
  // launch after the product. The same bits. Off, or where the kernel does not take the call
  // (bf16 weights on the matrix-unit product, vector loads, at most
  // hip::kMatMulRowsConvMaxRows rows and hip::kMatMulRowsConvMaxTaps taps), the default's two
  // calls.
  bool fuse_conv_product = true;
  // NormRopeAppendBatch (an attention layer's output gate split from its queries, the q and k
  // norms, RoPE and the append to the slots) in one launch, a warp per head row
  // (hip::NormRopeAppendBatch), instead of four. The same bits (its kernel and model tests,
  // H100). Off, without warp_row_norms, on AMD or for heads of more than 256 values: the
  // default's calls. About 0.01 ms a one-slot decode step on an H100 (HIP README,
  // fifty-seventh round).
  bool fuse_qk_norm_rope = true;
  // GatedDeltaStepNormBatch's gated norm inside the fused decode steps' launch: a head's
  // blocks run as one cluster and add their outputs' squares through one another's shared
  // memory in the norm kernel's tree (hip::GatedDeltaNorm), instead of a norm launch after the
  // steps. The same bits. NVIDIA sm_90; needs fuse_delta_inputs. Off: on an H100 (fifty-first
  // round, one process) no faster at one slot (MoE 1.43-1.44 ms a step against 1.44, dense
  // 6.44 both) and slower with more (MoE four slots 2.38-2.39 against 2.32-2.34 ms, dense
  // sixteen 10.58 against 10.08).
  bool fuse_delta_norm = false;
  // Resident blocks a multiprocessor the fused decode steps' kernel is compiled for
  // (hip::GatedDeltaRecurrentPrepared's min_blocks: 1 or 4; else Create refuses). The same
  // bits. 1: four measured no faster on an H100 (fifty-first round: MoE 1.44 / 2.35 ms a step
  // at one / four slots against 1.44 / 2.32).
  int delta_step_min_blocks = 1;
  // A MoE layer's shared expert (MoeExpertsArgs::shared_gate_up) in the decode path's grouped
  // gate/up and down launches, as tiles of 8 tokens after the routed experts' tiles, its output
  // written where the sum reads it (two launches fewer a layer). The same bits: the grouped
  // products are MatMulRowsMma's. Needs the routed experts' width, grouped_moe,
  // fuse_gate_up_silu and moe_kernels 1; else the shared expert runs first on its own.
  bool fold_shared_expert = true;
  // The decode path's grouped expert products (hip::MoeRowsMma): each warp takes as many of a
  // column tile's k segments as still leaves this many waves of blocks on the device (calls of
  // many tiles get fewer, longer-lived warps); 0: a warp a segment (MatMulRowsMma's layout). The
  // same bits for every value.
  int moe_product_waves = 4;
  // The decode path's grouped expert products by hip::MoeRowsStream instead (1: the gate/up
  // product with SiLU-mul; 2: the down product too; 0: neither): one long-lived block a
  // multiprocessor, its producer warp streaming each unit's weight rows into shared memory
  // ahead of the warps that multiply them (NVIDIA sm_90a builds; shapes it does not take keep
  // the launches above). 3, the default: both products in one such launch (hip::MoeLayerStream:
  // the gate/up weights, then the down weights, streamed without a break; a tile's down units
  // wait for its activations) for calls of at most moe_one_launch_max_tokens tokens whose
  // shapes it takes, else the grouped launches (thirty-sixth round: a MoE decode step 1.53 /
  // 2.46 against 1.60 / 2.51 ms at one / four slots on an H100). 4: the one launch also
  // routes and sorts the call itself (at most 512 experts and 128 picks; else the routing's own
  // launch before it); 5: and sums the picks into out (with the gate and residual) after a
  // barrier of its grid, where MoeCombine would (moe_kernels 1). The same bits.
  int moe_stream_products = 5;
  // The most tokens a call takes moe_stream_products 3-5's one launch with (at 16 the grouped
  // launches were faster: 4.81 against 4.84 ms a step on an H100).
  int moe_one_launch_max_tokens = 8;
  // moe_stream_products 3-5's one launch as a cooperative launch (its blocks wait for one
  // another, so the device starts it only with every block resident; a device that cannot hold
  // it at once, say under MPS, refuses it and the call takes the grouped launches). False, the
  // default: a plain launch, which rests on nothing else holding multiprocessors beside it (under
  // MPS, cairn-infer's --gpu-moe-one-launch=false). The same bits. Off: timed both ways in one
  // process on an H100 (forty-first round), the cooperative step was about 1 % slower at one and
  // four slots (1.56 against 1.53-1.55 ms, 2.42 against 2.39 ms).
  bool moe_one_launch_cooperative = false;
  // The share of each of the one launch's products its blocks split evenly before it runs, in
  // sixteenths (hip::MoeLayerStreamArgs::static_sixteenths; the same bits): 16, all of it; less,
  // the rest taken one stage load at a time from a counter by whichever block is ready first, so
  // that blocks which stream slower than the others (the forty-second round's phase stamps: at
  // four tokens the last block's gate/up units end 7 us after the median's) take fewer loads.
  // 16: on an H100 (fifty-third round, one process) 8 and 0 were slower at one and four slots
  // (1.45-1.46 and 1.46-1.48 against 1.44-1.45 ms; 2.41 and 2.45-2.47 against 2.32-2.34 ms): the
  // claims' round trips cost more than the tail they take.
  int moe_one_launch_static_sixteenths = 16;
  // The MoE one launch's routing in compact code (hip::MoeLayerStreamArgs::compact_route: each
  // expert's exp and division in a loop of four experts a turn instead of unrolled, one copy of
  // the routing in the kernel; with bf16 inputs the kernel's code 141 KB against 185). Every
  // launch's blocks fetch the code they run cold from memory, and the routing runs before
  // anything else in the launch (the forty-third round: 9 us cold against 4.4 warm at one
  // token). The same bits. On: in one process on an H100 (fifty-third round) the routing ended
  // 1.1 us sooner at one token and 2.8 us at four, and steps took 1.41-1.42 against 1.44-1.45
  // ms at one slot and 2.29-2.31 against 2.32-2.34 ms at four.
  bool moe_compact_route = true;
  // A MoE decode layer's router product (MoeExpertsArgs::router) inside moe_stream_products 5's
  // one launch, its units ahead of the routing and a grid barrier between (hip::MoeLayerStreamArgs
  // ::router), instead of a product launch before it. The same bits (MatMulRowsMma's units).
  // Calls the launch does not take run the product first. Off: on an H100 (fifty-first round)
  // no faster (MoE 1.45 / 2.34 ms a step at one / four slots against 1.44 / 2.32): the grid
  // barrier after the router's units costs what its launch's edge did.
  bool moe_router_inside = false;
  // The matrix-unit products' weight loads carry an evict_first L2 policy (hip::RowWeights::
  // streamed; the same bits): 1 always, 0 never, -1 in calls of at most
  // stream_product_weights_max_rows rows once this backend has run a MoE one launch
  // (hip::MoeLayerStream) and while moe_stream_products still asks for it (3 to 5), whose
  // expert units then stream faster. Measured on an H100
  // (forty-fourth round, ms a step at 1 / 4 / 16 slots, off against always on, one call): the
  // MoE 80B-like model 1.57 / 2.39 / 4.54 against 1.46 / 2.33 / 4.67 (the one launch 0.70
  // against 0.59 ms a one-slot step; the products themselves 3-6 % slower), the dense 9B-like
  // model, which has no one launch, 6.53 / 7.22 / 10.07 against 6.71 / 7.44 / 10.70.
  int stream_product_weights = -1;
  int64_t stream_product_weights_max_rows = 4;
  // The chunked delta rule (chunk 64, dk 64 or 128, dv a multiple of 8) on the
  // matrix units (hip::GatedDeltaMma: each fp32 operand split into two bf16 pieces, products
  // within a few 2^-17 of fp32; state, decays and the triangular solve in fp32) where the device
  // has them (NVIDIA); off, other shapes, or on AMD, the fp32 kernels (and their bits).
  bool mma_delta = true;
  // Row-kernel calls (fp32 weights, or bf16 with mma_rows off or on AMD) of 2 or more rows
  // take the multi-row kernel: up to 16 rows share each weight load, every part of the matrix
  // takes one launch, and the reduction tree is summed by many threads at once. The same bits
  // as the row kernel (the same order per element; tested), but measured slower on the H200
  // (kernels/hip/README.md), so off by default.
  bool multi_row_decode = false;
  // MoeExperts calls with row_invariant (decode) over bf16 experts, with mma_rows on NVIDIA,
  // run on the device: routing, the picks bucketed by expert, the experts' products as grouped
  // launches over every expert (hip::MoeRowsMma: MatMulRowsMma's arithmetic) and each token's
  // weighted sum in ascending expert id, with no wait for the device. The bits of the default
  // (which brings the routing to the host and runs each expert's products alone; tested). Off,
  // or for other calls, the default serves.
  bool grouped_moe = true;
  // The device path routes with a block per token (hip::MoeRouteBlock, the bits of
  // hip::MoeRoute) instead of MoeRoute's thread per token, which walks all experts top_k + 2
  // times alone.
  bool moe_block_route = true;
  // The MoE device paths' routing, sorting and sum (both decode and prefill), the same bits
  // either way: 0, a block per token routing (MoeRouteBlock), the sort in three launches and
  // the sum a block per token (the fifth and seventh rounds); 1, a warp per token routing with
  // the experts in registers, fused with the sort into one launch for calls of at most 32
  // tokens, sorts of at most hip::MoeMaxExperts() picks in one launch, and the sum a block per
  // (token, 256 columns) with the picks' rows loaded eight at a time (the eighth round).
  // moe_block_route off still routes with a thread per token.
  int moe_kernels = 1;
  // MoeExperts calls that are not row_invariant (prefill) over bf16 experts, with
  // bf16_gemm_inputs, on NVIDIA, stay on the device too: routing and bucketing as decode's
  // (tiles of hip::MoeGemmTileRows() picks), the picks' input rows rounded to bf16 once, one
  // grouped bf16 GEMM launch (hip::MoeGemmBf16) for gate/up and one for down over every
  // expert's tiles, SiLU-mul rounded to bf16 between them (moe_gemm_wgmma: hip::MoeGemmWgmma,
  // below), and decode's ordered sum. The default's roundings (inputs to bf16, fp32
  // accumulation), another order within the products: within the bf16 GEMM's tolerance of the
  // CPU backend, and a token's bits do not depend on which other tokens share the call
  // (tested). Needs grouped_moe; off, the default serves.
  bool grouped_moe_prefill = true;
  // grouped_moe_prefill's GEMMs on Hopper's warpgroup matrix instructions (hip::MoeGemmWgmma,
  // builds for sm_90a only; elsewhere this is ignored): tiles of 64 picks a warpgroup by 256
  // weight columns, and SiLU-mul in the gate/up launch's epilogue (no fp32 gate/up rows in
  // memory). Each output is again one chain of k16 instructions over k in order.
  bool moe_gemm_wgmma = true;
  // Warpgroups a block of moe_gemm_wgmma (2 or 3; the same bits): three take the about 160
  // picks an expert has in an 8192-token pass (top 10 of 512) in one tile, so each expert's
  // weights cross from L2 to the multiprocessors once a pass, not twice.
  int moe_gemm_wgmma_warpgroups = 3;
  // moe_gemm_wgmma's GEMMs with a producer warpgroup feeding the multiplying ones (hip::
  // MoeGemmTma: the weights by tensor maps of each expert part, made with the experts' table),
  // where the device has tensor maps and every part boundary falls on a box (else
  // moe_gemm_wgmma's kernel). The same bits. 0: off; 1: blocks of 256 weight columns by tiles
  // of 128 picks; 2: 128 columns by 192 picks. Off: slower than moe_gemm_wgmma's three
  // warpgroups at passes of 8192 tokens and more (HIP README, forty-sixth round).
  int moe_gemm_tma = 0;
  // RmsNorm, GatedRmsNorm and L2Normalize of rows of at most 256 values (attention's and the
  // delta rule's heads) take a warp per row instead of a block of 256 threads (most of them
  // idle, a barrier per level of the sum's tree), adding the same partial sums in the same
  // tree: the same bits (tested). NVIDIA only.
  bool warp_row_norms = true;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_OPTIONS_H_
