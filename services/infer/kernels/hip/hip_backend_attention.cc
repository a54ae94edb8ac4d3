// HipKernelBackend's attention layer: RoPE with the new key and value rows appended to the
// slots (a pass's sequences in one launch), that launch with the output gate's split and the q
// and k norms before it (fuse_qk_norm_rope), and attention itself, single calls and a pass's
// decode calls in one launch. The rest of the backend is in hip_kernel_backend.cc.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/infer/kernels/hip/hip_errors.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {

using hip::Invalid;

void HipKernelBackend::RopeAppendBatch(absl::Span<const RopeAppendArgs> batch) {
  std::vector<hip::RopeAppendSequence> run;
  const RopeAppendArgs* shape = nullptr;  // The run's strides, heads and rotary table.
  const auto flush = [&] {
    if (!run.empty() && Enter()) {
      Check(hip::RopeAppendBatch(run.data(), static_cast<int>(run.size()), shape->q_ld,
                                 shape->q_heads, shape->kv_ld, shape->kv_heads, shape->head_dim,
                                 shape->rotary_dim, shape->inv_freq, compute_),
            "rope append batch launch");
    }
    run.clear();
  };
  for (const RopeAppendArgs& a : batch) {
    if (!Enter()) return;
    const int64_t width = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    if (a.rotary_dim > a.head_dim || a.rotary_dim < 0 || a.q_heads < 0 || a.kv_heads < 0 ||
        a.head_dim < 0 || a.tokens < 0 || a.q_ld < static_cast<int64_t>(a.q_heads) * a.head_dim ||
        a.kv_ld < width) {
      Keep(
          Invalid("rope append", absl::StrCat("bad shape: rotary_dim ", a.rotary_dim, ", head_dim ",
                                              a.head_dim, ", q_ld ", a.q_ld, ", kv_ld ", a.kv_ld)));
      return;
    }
    if (a.tokens == 0) continue;
    const bool joins =
        shape != nullptr && static_cast<int>(run.size()) < hip::RopeAppendMaxBatch() &&
        a.q_ld == shape->q_ld && a.q_heads == shape->q_heads && a.kv_ld == shape->kv_ld &&
        a.kv_heads == shape->kv_heads && a.head_dim == shape->head_dim &&
        a.rotary_dim == shape->rotary_dim && a.inv_freq == shape->inv_freq;
    if (!joins) {
      flush();
      shape = &a;
    }
    run.push_back({a.q, a.k, a.v, a.k_dst, a.v_dst, a.tokens, a.position});
  }
  flush();
}

namespace {

// The row of `base`'s rows (`ld` floats apart) that `p` starts, or -1 where it starts none. By
// addresses: `p` may point into another buffer, which pointer arithmetic must not compare.
int64_t RowOf(const float* p, const float* base, int64_t ld) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p), first = reinterpret_cast<uintptr_t>(base);
  const uintptr_t row_bytes = static_cast<uintptr_t>(ld) * sizeof(float);
  if (at < first || (at - first) % row_bytes != 0) return -1;
  return static_cast<int64_t>((at - first) / row_bytes);
}

// Whether NormRopeAppendBatch's one launch takes (n, batch): every sequence at n's shape and
// one rotary table, its q and k rows within n's at the same row, the rows covered once.
bool NormRopeTakes(const QkNormArgs& n, absl::Span<const RopeAppendArgs> batch) {
  if (batch.empty() || n.rows <= 0 || n.q_heads <= 0 || n.kv_heads < 0 || n.q_ld <= 0 ||
      n.kv_ld <= 0 || !hip::NormRopeAppendSupported(n.head_dim)) {
    return false;
  }
  const int64_t q_width = static_cast<int64_t>(n.q_heads) * n.head_dim;
  if (n.q_ld < q_width || n.kv_ld < static_cast<int64_t>(n.kv_heads) * n.head_dim) return false;
  if (n.qg != nullptr && (n.gate == nullptr || n.q_ld != q_width || n.qg_ld < 2 * q_width)) {
    return false;
  }
  std::vector<std::pair<int64_t, int64_t>> spans;  // (first row, tokens) of each sequence.
  spans.reserve(batch.size());
  for (const RopeAppendArgs& a : batch) {
    if (a.q_ld != n.q_ld || a.kv_ld != n.kv_ld || a.q_heads != n.q_heads ||
        a.kv_heads != n.kv_heads || a.head_dim != n.head_dim ||
        a.rotary_dim != batch[0].rotary_dim || a.inv_freq != batch[0].inv_freq ||
        a.rotary_dim < 0 || a.rotary_dim > a.head_dim || a.tokens < 0) {
      return false;
    }
    const int64_t row = RowOf(a.q, n.q, n.q_ld);
    if (row < 0 || row + a.tokens > n.rows || RowOf(a.k, n.k, n.kv_ld) != row) return false;
    spans.emplace_back(row, a.tokens);
  }
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [row, tokens] : spans) {
    if (row != next) return false;
    next += tokens;
  }
  return next == n.rows;
}

}  // namespace

void HipKernelBackend::NormRopeAppendBatch(const QkNormArgs& n,
                                           absl::Span<const RopeAppendArgs> batch) {
  if (!Enter()) return;
  if (!fuse_qk_norm_rope_ || !options_.warp_row_norms || !NormRopeTakes(n, batch)) {
    KernelBackend::NormRopeAppendBatch(n, batch);
    return;
  }
  const int64_t q_width = static_cast<int64_t>(n.q_heads) * n.head_dim;
  std::vector<hip::NormRopeSequence> run;
  const auto flush = [&] {
    if (!run.empty() && Enter()) {
      const RopeAppendArgs& shape = batch[0];
      Check(hip::NormRopeAppendBatch(run.data(), static_cast<int>(run.size()), n.q_ld, n.qg_ld,
                                     n.q_heads, n.kv_ld, n.kv_heads, n.head_dim, shape.rotary_dim,
                                     shape.inv_freq, n.q_norm, n.k_norm, n.eps, n.zero_centred,
                                     compute_),
            "norm rope append launch");
      ++norm_rope_launches_;
    }
    run.clear();
  };
  for (const RopeAppendArgs& a : batch) {
    if (a.tokens == 0) continue;
    const int64_t row = RowOf(a.q, n.q, n.q_ld);
    run.push_back({a.q, n.qg != nullptr ? n.qg + row * n.qg_ld : nullptr,
                   n.qg != nullptr ? n.gate + row * q_width : nullptr, n.k + row * n.kv_ld, a.v,
                   a.k_dst, a.v_dst, a.tokens, a.position});
    if (static_cast<int>(run.size()) == hip::RopeAppendMaxBatch()) flush();
  }
  flush();
}

bool HipKernelBackend::CheckAttention(const AttentionArgs& a) {
  if (a.q_heads <= 0 || a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0) {
    Keep(Invalid("attention", absl::StrCat("q_heads ", a.q_heads, " is not a multiple of kv_heads ",
                                           a.kv_heads)));
    return false;
  }
  if (a.head_dim <= 0 || a.head_dim > hip::AttentionMaxHeadDim() ||
      hip::AttentionSharedBytes(a.head_dim) > static_cast<size_t>(max_shared_bytes_)) {
    Keep(Invalid("attention", absl::StrCat("head_dim ", a.head_dim, " unsupported (max ",
                                           hip::AttentionMaxHeadDim(), ")")));
    return false;
  }
  if (a.tokens < 0 || a.past < 0) {
    Keep(Invalid("attention", "negative tokens or past"));
    return false;
  }
  if ((a.past + a.tokens + options_.attention_split_keys - 1) / options_.attention_split_keys >
      hip::AttentionMaxSplits()) {
    // Only the split path is bounded; calls that take another path are not refused.
    const bool split = a.row_invariant || a.tokens <= options_.attention_decode_max_tokens;
    if (split) {
      Keep(Invalid(
          "attention",
          absl::StrCat(a.past + a.tokens, " keys exceed ", hip::AttentionMaxSplits(), " ranges of ",
                       options_.attention_split_keys, " (raise attention_split_keys)")));
      return false;
    }
  }
  return true;
}

void HipKernelBackend::Attention(const AttentionArgs& a) {
  if (!Enter() || a.tokens == 0 || !CheckAttention(a)) return;
  hip::AttentionLaunch l{a.q,       a.k,        a.v,        a.out,   a.tokens, a.past,
                         a.q_heads, a.kv_heads, a.head_dim, a.scale, 0};
  const bool split = a.row_invariant || a.tokens <= options_.attention_decode_max_tokens;
  if (!split && options_.bf16_attention && hip::AttentionMmaSupported(l, max_shared_bytes_)) {
    const int64_t bytes = hip::AttentionMmaWorkspaceBytes(l);
    float* ws = Workspace((bytes + 3) / 4);
    if (ws == nullptr) return;
    Check(hip::AttentionMma(l, attention_mma_variant_, ws, compute_),
          "attention (matrix units) launch");
    return;
  }
  if (split) l.split_keys = options_.attention_split_keys;
  // Row-invariant calls always take the split path (a row's bits then depend on its position
  // alone, whatever the pass), a bounded group of query tokens at a time. They never take the
  // matrix-unit decode blocks, whose bits differ from the tile kernel's that their longer
  // groups run: a variant with variant 0's bits instead.
  const int variant =
      a.row_invariant && attention_decode_variant_ == hip::kAttentionDecodeMmaVariant
          ? hip::kAttentionDecodeMmaFallbackVariant
          : attention_decode_variant_;
  const int64_t step = a.row_invariant ? options_.attention_invariant_group_tokens : a.tokens;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  for (int64_t t0 = 0; t0 < a.tokens; t0 += step) {
    hip::AttentionLaunch part = l;
    part.q = a.q + t0 * q_ld;
    part.out = a.out + t0 * q_ld;
    part.tokens = std::min(step, a.tokens - t0);
    part.past = a.past + t0;
    float* ws = nullptr;
    const int64_t ws_floats = hip::AttentionWorkspaceFloats(part);
    if (ws_floats > 0 && (ws = Workspace(ws_floats)) == nullptr) return;
    if (!Check(hip::Attention(part, variant, DecodeSpread(), ws, compute_), "attention launch")) {
      return;
    }
  }
}

void HipKernelBackend::AttentionBatch(absl::Span<const AttentionArgs> batch) {
  std::vector<hip::AttentionLaunch> run;
  int64_t run_ranges = 0;  // The most key ranges of one call in `run`.
  // With the matrix-unit decode blocks, whose bits are their own, a run holds only calls they
  // take or only calls they do not, so that no call's kernel depends on its batch.
  const bool mma = attention_decode_variant_ == hip::kAttentionDecodeMmaVariant;
  bool run_mma = false;
  const auto flush = [&] {
    if (run.size() == 1) {
      // One call: the one-call launch (the same bits).
      hip::AttentionLaunch& l = run[0];
      float* ws = Workspace(hip::AttentionWorkspaceFloats(l));
      if (ws != nullptr) {
        Check(hip::Attention(l, attention_decode_variant_, DecodeSpread(), ws, compute_),
              "attention launch");
      }
    } else if (!run.empty()) {
      int64_t floats = 0;
      for (const hip::AttentionLaunch& l : run) floats += hip::AttentionWorkspaceFloats(l);
      float* ws = Workspace(floats);
      if (ws != nullptr) {
        Check(hip::AttentionSplitBatch(run.data(), static_cast<int>(run.size()),
                                       attention_decode_variant_, DecodeSpread(), ws, compute_),
              "attention batch launch");
      }
    }
    run.clear();
    run_ranges = 0;
  };
  for (const AttentionArgs& a : batch) {
    if (!Enter()) return;
    if (a.tokens == 0) continue;
    if (!CheckAttention(a)) return;
    if (a.row_invariant || a.tokens > options_.attention_decode_max_tokens) {
      flush();
      Attention(a);
      continue;
    }
    const int64_t ranges =
        (a.past + a.tokens + options_.attention_split_keys - 1) / options_.attention_split_keys;
    const int64_t widest = std::max(run_ranges, ranges);
    bool joins = static_cast<int>(run.size()) < hip::AttentionMaxBatch() &&
                 widest * static_cast<int64_t>(run.size() + 1) <= hip::AttentionMaxBatchRanges();
    const hip::AttentionLaunch launch{a.q,
                                      a.k,
                                      a.v,
                                      a.out,
                                      a.tokens,
                                      a.past,
                                      a.q_heads,
                                      a.kv_heads,
                                      a.head_dim,
                                      a.scale,
                                      options_.attention_split_keys};
    const bool takes_mma = mma && hip::AttentionDecodeMmaTakes(launch);
    if (!run.empty()) {
      joins = joins && run[0].q_heads == a.q_heads && run[0].kv_heads == a.kv_heads &&
              run[0].head_dim == a.head_dim && run_mma == takes_mma;
    }
    if (!joins) flush();
    run.push_back(launch);
    run_mma = takes_mma;
    run_ranges = std::max(run_ranges, ranges);
  }
  flush();
}

}  // namespace cairn::infer
