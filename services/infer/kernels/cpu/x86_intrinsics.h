#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_X86_INTRINSICS_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_X86_INTRINSICS_H_

// <immintrin.h> for the CPU backend's x86 kernels. GCC 12 reports the deliberately undefined
// pass-through operand inside its AVX-512 intrinsics as uninitialised (a false positive at -O1).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_X86_INTRINSICS_H_
