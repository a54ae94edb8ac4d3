// HipKernelBackend's products: the fp32 and bf16 row products and GEMMs, the fused SwiGLU
// gate/up product, and the rounded copies of product inputs that the norms, SiLU-mul and the
// sigmoid gate leave for them (HipKernelBackendOptions::round_product_inputs_max_bytes). The
// rest of the backend is in hip_kernel_backend.cc; its memory in hip_backend_memory.cc.

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "services/infer/kernels/hip/hip_errors.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {

using hip::Invalid;

namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

uint16_t* HipKernelBackend::RoundedOutput(int64_t rows, int64_t count, int64_t width, int* buffer) {
  const int64_t bytes = count * static_cast<int64_t>(sizeof(uint16_t));
  const bool readers =
      (options_.mma_rows && mma_rows_bf16_inputs_ && hip::MatMulRowsMmaSupported()) ||
      options_.bf16_gemm_inputs;
  if (!readers || count <= 0 || width <= 0 || width % 8 != 0 ||
      (rows >= 0 && rows < options_.round_product_inputs_min_rows) ||
      bytes > round_product_inputs_max_bytes_) {
    return nullptr;
  }
  *buffer = rounded_.x != nullptr ? 1 - rounded_.buffer : 0;
  DeviceBuffer& into = rounded_buffers_[*buffer];
  if (bytes > into.size()) {
    // Doubling, so that growing passes allocate a few times only; without the memory, no copy.
    const int64_t size =
        std::min(std::max(bytes, 2 * into.size()), round_product_inputs_max_bytes_);
    into.Reset();  // hipFree waits for the kernels still using it.
    absl::StatusOr<DeviceBuffer> b = Allocate(size);
    if (!b.ok()) return nullptr;
    into = *std::move(b);
  }
  return static_cast<uint16_t*>(into.data());
}

const uint16_t* HipKernelBackend::RoundedInputs(const float* x, int64_t m, int64_t k,
                                                int64_t ldx) const {
  if (rounded_.x == nullptr || m <= 0 || x < rounded_.x || ldx % 8 != 0) return nullptr;
  const int64_t at = x - rounded_.x;
  if (at % 8 != 0 || at + (m - 1) * ldx + k > rounded_.count) return nullptr;
  return rounded_.data + at;
}

void HipKernelBackend::ForgetRoundedRowsIn(const void* begin, const void* end) {
  const auto* b = static_cast<const char*>(begin);
  const auto* e = static_cast<const char*>(end);
  const auto* x = reinterpret_cast<const char*>(rounded_.x);
  if (x != nullptr && b < x + rounded_.count * static_cast<int64_t>(sizeof(float)) && x < e) {
    rounded_ = {};
  }
}

void HipKernelBackend::MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx,
                                        const float* w, int64_t n, float* y, int64_t ldy,
                                        bool accumulate) {
  if (!Enter() || m == 0 || n == 0) return;
  if (m < 0 || n < 0 || k < 0 || ldx < k || ldy < n) {
    Keep(Invalid("matmul", absl::StrCat("bad shape m=", m, " n=", n, " k=", k)));
    return;
  }
  Keep(blas_->GemmNT(m, n, k, x, ldx, w, k, y, ldy, accumulate ? 1.0f : 0.0f));
}

void HipKernelBackend::MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                                  int64_t n, float* y, int64_t ldy, bool accumulate) {
  if (!Enter() || m == 0 || n == 0) return;
  if (m < 0 || n < 0 || k < 0 || ldx < k || ldy < n || n > hip::MatMulRowsMaxColumns()) {
    Keep(Invalid("matmul rows", absl::StrCat("bad shape m=", m, " n=", n, " k=", k)));
    return;
  }
  Check(
      hip::MatMulRows(x, m, k, ldx, w, n, y, ldy, accumulate, options_.multi_row_decode, compute_),
      "matmul rows launch");
}

bool HipKernelBackend::CheckTyped(const char* op, const WeightMatrix& w, int64_t m, int64_t ldx,
                                  int64_t ldy) {
  if (!AcceptsWeightType(w.type) || w.layout != WeightLayout::kRows || w.num_parts < 1 ||
      w.num_parts > WeightMatrix::kMaxParts) {
    return Keep(Invalid(
        op, absl::StrCat("weight type ", static_cast<int>(w.type), " (layout ",
                         static_cast<int>(w.layout), ") in ", w.num_parts, " parts not taken")));
  }
  for (int i = 0; i < w.num_parts; ++i) {
    if (w.parts[i].rows < 0 || w.parts[i].rows > hip::MatMulRowsMaxColumns()) {
      return Keep(Invalid(op, absl::StrCat("part ", i, " has ", w.parts[i].rows, " rows")));
    }
  }
  if (m < 0 || w.cols <= 0 || ldx < w.cols || ldy < w.rows()) {
    return Keep(Invalid(op, absl::StrCat("bad shape m=", m, " n=", w.rows(), " k=", w.cols,
                                         " ldx=", ldx, " ldy=", ldy)));
  }
  return true;
}

void HipKernelBackend::MatMulRowsTyped(const float* x, int64_t m, int64_t ldx,
                                       const WeightMatrix& w, float* y, int64_t ldy,
                                       bool accumulate) {
  if (!Enter(/*keep_rounded=*/true) || m == 0 || !CheckTyped("matmul rows", w, m, ldx, ldy)) {
    return;
  }
  // The inputs as a norm or SiLU-mul just rounded them, where it did.
  const bool mma_bf16 = w.type == WeightType::kBF16 && options_.mma_rows && mma_rows_bf16_inputs_ &&
                        hip::MatMulRowsMmaSupported();
  const uint16_t* rounded = mma_bf16 && m >= options_.round_product_inputs_min_rows
                                ? RoundedInputs(x, m, w.cols, ldx)
                                : nullptr;
  if (rounded != nullptr) ++rounded_input_reads_;
  ForgetRoundedRowsIn(y, y + (m - 1) * ldy + w.rows());
  // Every part in one call where their rows together fit the kernels' grid; else a call per
  // part (the same bits: a column's sum does not depend on the launch).
  const int64_t k = w.cols;
  const bool one_launch = w.rows() <= hip::MatMulRowsMaxColumns();
  // The matrix-unit product cuts k by its columns: those of the whole matrix, for a range.
  const int64_t whole_n = w.whole_rows > 0 ? w.whole_rows : w.rows();
  int64_t col = 0;
  for (int i = 0; i < w.num_parts;) {
    hip::RowWeights parts{};
    parts.bf16 = w.type == WeightType::kBF16;
    parts.streamed = StreamProductWeights(m);
    const int64_t first = col;
    for (; i < w.num_parts && (parts.count == 0 || one_launch); ++i, ++parts.count) {
      parts.data[parts.count] = w.parts[i].data;
      parts.rows[parts.count] = w.parts[i].rows;
      col += w.parts[i].rows;
    }
    const bool mma = parts.bf16 && options_.mma_rows && hip::MatMulRowsMmaSupported();
    // The inputs rounded to bf16 once, into the workspace, for calls of enough rows over
    // enough weights (the rounding is a launch of its own).
    uint16_t* staging = nullptr;
    if (mma && rounded == nullptr && mma_rows_bf16_inputs_ && mma_rows_staged_min_rows_ > 0 &&
        m >= mma_rows_staged_min_rows_ &&
        (col - first) * k * static_cast<int64_t>(sizeof(uint16_t)) >= mma_rows_staged_min_bytes_) {
      const int64_t bytes = hip::MatMulRowsMmaStagingBytes(m, k);
      staging = reinterpret_cast<uint16_t*>(Workspace((bytes + 3) / 4));
      if (staging == nullptr) return;
    }
    hipError_t e;
    if (mma && rounded != nullptr) {
      e = hip::MatMulRowsMmaRounded(rounded, m, k, ldx, parts, y + first, ldy, accumulate,
                                    options_.mma_rows_tiles_of_8, mma_rows_variant_,
                                    multiprocessors_, whole_n, PrefetchK(m), compute_);
    } else if (mma) {
      e = hip::MatMulRowsMma(x, m, k, ldx, parts, y + first, ldy, accumulate, mma_rows_bf16_inputs_,
                             options_.mma_rows_tiles_of_8, mma_rows_variant_, multiprocessors_,
                             whole_n, staging, PrefetchK(m), compute_);
    } else {
      e = hip::MatMulRowsParts(x, m, k, ldx, parts, y + first, ldy, accumulate,
                               options_.multi_row_decode, compute_);
    }
    if (!Check(e, "matmul rows launch")) {
      return;
    }
  }
}

void HipKernelBackend::MatMulRowsSiluMul(const float* x, int64_t m, int64_t ldx,
                                         const WeightMatrix& w, float* gu, float* act) {
  const int64_t width = w.rows() / 2;
  bool fused = fuse_gate_up_silu_ && w.type == WeightType::kBF16 && options_.mma_rows &&
               mma_rows_bf16_inputs_ && hip::MatMulRowsMmaSupported() && w.whole_rows <= 0 &&
               width % 8 == 0 && w.rows() == 2 * width && w.num_parts <= 4 &&
               w.rows() <= hip::MatMulRowsMaxColumns() && w.cols % 8 == 0;
  for (int i = 0; fused && i < w.num_parts; ++i) fused = Aligned16(w.parts[i].data);
  // The kernel's vector loads: a rounded copy's rows are aligned (RoundedInputs), fp32 rows
  // must be.
  const uint16_t* xb = fused && m >= options_.round_product_inputs_min_rows
                           ? RoundedInputs(x, m, w.cols, ldx)
                           : nullptr;
  fused = fused && (xb != nullptr || (ldx % 4 == 0 && Aligned16(x)));
  if (!fused) {
    KernelBackend::MatMulRowsSiluMul(x, m, ldx, w, gu, act);
    return;
  }
  if (!Enter(/*keep_rounded=*/true) || m == 0 ||
      !CheckTyped("matmul rows silu mul", w, m, ldx, w.rows())) {
    return;
  }
  if (xb != nullptr) ++rounded_input_reads_;
  int buffer = 0;
  uint16_t* act_rounded = RoundedOutput(m, m * width, width, &buffer);
  const hip::RowWeights parts = Bf16Parts(w, m);
  rounded_ = {};
  if (Check(hip::MatMulRowsMmaSiluMul(xb != nullptr ? nullptr : x, xb, m, w.cols, ldx, parts, width,
                                      act, act_rounded, options_.mma_rows_tiles_of_8,
                                      mma_rows_variant_, multiprocessors_, PrefetchK(m), compute_),
            "matmul rows silu mul launch") &&
      act_rounded != nullptr) {
    rounded_ = {act, m * width, act_rounded, buffer};
  }
}

hip::RowWeights HipKernelBackend::Bf16Parts(const WeightMatrix& w, int64_t m) const {
  hip::RowWeights parts{};
  parts.bf16 = true;
  parts.streamed = StreamProductWeights(m);
  for (int i = 0; i < w.num_parts; ++i, ++parts.count) {
    parts.data[i] = w.parts[i].data;
    parts.rows[i] = w.parts[i].rows;
  }
  return parts;
}

bool HipKernelBackend::OneLaunchMmaProduct(const WeightMatrix& w, int64_t m, int64_t ldy) const {
  bool fits = w.type == WeightType::kBF16 && options_.mma_rows && mma_rows_bf16_inputs_ &&
              hip::MatMulRowsMmaSupported() && m >= 1 && m <= hip::kMatMulRowsConvMaxRows &&
              w.num_parts >= 1 && w.num_parts <= WeightMatrix::kMaxParts &&
              w.rows() <= hip::MatMulRowsMaxColumns() && w.cols % 8 == 0 && ldy >= w.rows();
  for (int i = 0; fits && i < w.num_parts; ++i) fits = Aligned16(w.parts[i].data);
  return fits;
}

bool HipKernelBackend::ConvFitsProduct(absl::Span<const CausalConvArgs> convs, int64_t m,
                                       const WeightMatrix& w, const float* y, int64_t ldy,
                                       hip::RowsConv* conv) {
  // Each call one token whose input is the product's row of the same index, one shape for all,
  // distinct states.
  bool fused = static_cast<int64_t>(convs.size()) == m && m <= hip::kMatMulRowsConvMaxRows;
  for (int64_t r = 0; fused && r < m; ++r) {
    const CausalConvArgs& a = convs[static_cast<size_t>(r)];
    fused = a.tokens == 1 && a.in == y + r * ldy && a.channels == convs[0].channels &&
            a.w == convs[0].w && a.kernel == convs[0].kernel && a.channels >= 0 &&
            a.channels <= w.rows() && a.kernel >= 1 && a.kernel <= hip::kMatMulRowsConvMaxTaps &&
            a.out != nullptr && (a.kernel == 1 || a.state != nullptr);
    for (int64_t q = 0; fused && q < r; ++q) {
      fused = a.kernel == 1 || convs[static_cast<size_t>(q)].state != a.state;
    }
    if (fused) {
      conv->state[r] = a.state;
      conv->out[r] = a.out;
    }
  }
  if (fused) {
    conv->w = convs[0].w;
    conv->kernel = convs[0].kernel;
    conv->channels = convs[0].channels;
  }
  return fused;
}

void HipKernelBackend::MatMulRowsCausalConv(const float* x, int64_t m, int64_t ldx,
                                            const WeightMatrix& w, float* y, int64_t ldy,
                                            absl::Span<const CausalConvArgs> convs) {
  hip::RowsConv conv;
  bool fused = fuse_conv_product_ && OneLaunchMmaProduct(w, m, ldy) &&
               ConvFitsProduct(convs, m, w, y, ldy, &conv);
  const uint16_t* xb = fused && m >= options_.round_product_inputs_min_rows
                           ? RoundedInputs(x, m, w.cols, ldx)
                           : nullptr;
  fused = fused && (xb != nullptr || (ldx % 4 == 0 && Aligned16(x)));
  if (!fused) {
    KernelBackend::MatMulRowsCausalConv(x, m, ldx, w, y, ldy, convs);
    return;
  }
  if (!Enter(/*keep_rounded=*/true) || !CheckTyped("matmul rows causal conv", w, m, ldx, ldy)) {
    return;
  }
  if (xb != nullptr) ++rounded_input_reads_;
  const hip::RowWeights parts = Bf16Parts(w, m);
  // What the conv launch's entry would have forgotten (it writes no rounded copy).
  rounded_ = {};
  const int64_t whole_n = w.whole_rows > 0 ? w.whole_rows : w.rows();
  Check(hip::MatMulRowsMmaConv(xb != nullptr ? nullptr : x, xb, m, w.cols, ldx, parts, y, ldy, conv,
                               options_.mma_rows_tiles_of_8, mma_rows_variant_, multiprocessors_,
                               whole_n, PrefetchK(m), compute_),
        "matmul rows causal conv launch");
}

void HipKernelBackend::MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx,
                                             const WeightMatrix& w, float* y, int64_t ldy,
                                             bool accumulate) {
  if (!Enter(/*keep_rounded=*/true) || m == 0 || !CheckTyped("matmul", w, m, ldx, ldy)) return;
  const int64_t k = w.cols;
  // The inputs as a norm or SiLU-mul just rounded them, where it did, in the row stride the
  // rounding below would give them (the pinned algorithm follows the strides and alignment).
  const uint16_t* rounded =
      options_.bf16_gemm_inputs && w.type == WeightType::kBF16 && ldx == (k + 7) / 8 * 8
          ? RoundedInputs(x, m, k, ldx)
          : nullptr;
  if (rounded != nullptr) ++rounded_input_reads_;
  ForgetRoundedRowsIn(y, y + (m - 1) * ldy + w.rows());
  const float beta = accumulate ? 1.0f : 0.0f;
  if (w.type == WeightType::kF32) {
    int64_t col = 0;
    for (int i = 0; i < w.num_parts; ++i) {
      const WeightMatrix::Part& part = w.parts[i];
      if (!Keep(blas_->GemmNT(m, part.rows, k, x, ldx, static_cast<const float*>(part.data), k,
                              y + col, ldy, beta))) {
        return;
      }
      col += part.rows;
    }
    return;
  }
  if (options_.bf16_gemm_inputs) {
    // The input rows once in bf16, rows padded to 16 bytes for the matrix units' loads.
    int64_t ld = (k + 7) / 8 * 8;
    const uint16_t* xb = rounded;
    if (xb != nullptr) {
      ld = ldx;
    } else {
      auto* staged = reinterpret_cast<uint16_t*>(Workspace((m * ld + 1) / 2));
      if (staged == nullptr || !Check(hip::RoundRowsToBf16(x, m, k, ldx, staged, ld, compute_),
                                      "bf16 rounding launch")) {
        return;
      }
      xb = staged;
    }
    int64_t col = 0;
    for (int i = 0; i < w.num_parts; ++i) {
      const WeightMatrix::Part& part = w.parts[i];
      if (!Keep(blas_->GemmNTBf16(m, part.rows, k, xb, ld, static_cast<const uint16_t*>(part.data),
                                  k, y + col, ldy, beta))) {
        return;
      }
      col += part.rows;
    }
    return;
  }
  // fp32 inputs: each part widened into the workspace (stream order keeps a part's product
  // ahead of the next part's widening), then the fp32 GEMM.
  int64_t widest = 0;
  for (int i = 0; i < w.num_parts; ++i) widest = std::max(widest, w.parts[i].rows);
  float* wide = Workspace(widest * k);
  if (wide == nullptr) return;
  int64_t col = 0;
  for (int i = 0; i < w.num_parts; ++i) {
    const WeightMatrix::Part& part = w.parts[i];
    if (!Check(
            hip::WidenBf16(static_cast<const uint16_t*>(part.data), part.rows * k, wide, compute_),
            "bf16 widening launch") ||
        !Keep(blas_->GemmNT(m, part.rows, k, x, ldx, wide, k, y + col, ldy, beta))) {
      return;
    }
    col += part.rows;
  }
}

}  // namespace cairn::infer
