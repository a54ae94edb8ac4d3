#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_COMPAT_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_COMPAT_H_

// The project's own HIP portability header (style.md §9). On AMD it is <hip/hip_runtime.h>.
// Under nvcc (and the host compiler of an NVIDIA build, CAIRN_HIP_PLATFORM_NVIDIA) it is
// <cuda_runtime.h> plus the hip* runtime names this backend calls, mapped one to one onto CUDA:
// Debian's HIP headers for the NVIDIA platform do not compile against CUDA 13. Only names we
// use are mapped; a new runtime call adds one line here.
//
// Kernel code uses the spellings both compilers share (__global__, __shared__,
// __syncthreads(), threadIdx, <<<...>>> launches) and never assumes a warp of 32 lanes.

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)

#include <hip/hip_runtime.h>

// The shared memory one block may use at most. AMD has no opt-in beyond the per-block limit.
inline constexpr hipDeviceAttribute_t kCairnMaxSharedPerBlockAttribute =
    hipDeviceAttributeMaxSharedMemoryPerBlock;

#elif defined(CAIRN_HIP_PLATFORM_NVIDIA) || defined(__CUDACC__)

#include <cuda_runtime.h>

// Types and constants.
using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipMemcpyKind = cudaMemcpyKind;
using hipFuncAttribute = cudaFuncAttribute;
using hipDeviceAttribute_t = cudaDeviceAttr;
inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorNoDevice = cudaErrorNoDevice;
inline constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr hipError_t hipErrorMemoryAllocation = cudaErrorMemoryAllocation;
inline constexpr hipError_t hipErrorInsufficientDriver = cudaErrorInsufficientDriver;
inline constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
inline constexpr hipError_t hipErrorNotSupported = cudaErrorNotSupported;
inline constexpr hipError_t hipErrorCooperativeLaunchTooLarge = cudaErrorCooperativeLaunchTooLarge;
inline constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr unsigned int hipStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr unsigned int hipEventDisableTiming = cudaEventDisableTiming;
inline constexpr unsigned int hipHostRegisterDefault = cudaHostRegisterDefault;
inline constexpr hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize =
    cudaFuncAttributeMaxDynamicSharedMemorySize;
inline constexpr hipFuncAttribute hipFuncAttributePreferredSharedMemoryCarveout =
    cudaFuncAttributePreferredSharedMemoryCarveout;
inline constexpr hipDeviceAttribute_t hipDeviceAttributeMultiprocessorCount =
    cudaDevAttrMultiProcessorCount;
// The shared memory one block may use at most, after opting in (cudaFuncSetAttribute).
inline constexpr hipDeviceAttribute_t kCairnMaxSharedPerBlockAttribute =
    cudaDevAttrMaxSharedMemoryPerBlockOptin;

// Runtime calls.
inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline const char* hipGetErrorName(hipError_t e) { return cudaGetErrorName(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t a, int d) {
  return cudaDeviceGetAttribute(v, a, d);
}
inline hipError_t hipDeviceGetName(char* name, int len, int d) {
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, d);
  if (e != cudaSuccess) return e;
  int i = 0;
  for (; i + 1 < len && p.name[i] != '\0'; ++i) name[i] = p.name[i];
  if (len > 0) name[i] = '\0';
  return cudaSuccess;
}
inline hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total) {
  return cudaMemGetInfo(free_bytes, total);
}
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipHostRegister(void* p, size_t n, unsigned int flags) {
  return cudaHostRegister(p, n, flags);
}
inline hipError_t hipHostUnregister(void* p) { return cudaHostUnregister(p); }
inline hipError_t hipHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  return cudaHostGetDevicePointer(device, host, flags);
}
inline hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, hipMemcpyKind k,
                                 hipStream_t s) {
  return cudaMemcpyAsync(dst, src, n, k, s);
}
inline hipError_t hipMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, hipMemcpyKind k, hipStream_t s) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, k, s);
}
inline hipError_t hipMemsetAsync(void* p, int v, size_t n, hipStream_t s) {
  return cudaMemsetAsync(p, v, n, s);
}
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned int flags) {
  return cudaStreamCreateWithFlags(s, flags);
}
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int flags) {
  return cudaStreamWaitEvent(s, e, flags);
}
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventCreateWithFlags(hipEvent_t* e, unsigned int flags) {
  return cudaEventCreateWithFlags(e, flags);
}
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventQuery(hipEvent_t e) { return cudaEventQuery(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
  return cudaEventElapsedTime(ms, a, b);
}
inline hipError_t hipFuncSetAttribute(const void* f, hipFuncAttribute a, int v) {
  return cudaFuncSetAttribute(f, a, v);
}
// Stream capture into graphs (the kernel benchmark's launch-chain probe).
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipStreamCaptureMode = cudaStreamCaptureMode;
inline constexpr hipStreamCaptureMode hipStreamCaptureModeThreadLocal =
    cudaStreamCaptureModeThreadLocal;
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode) {
  return cudaStreamBeginCapture(s, mode);
}
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* g) {
  return cudaStreamEndCapture(s, g);
}
inline hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t* e, hipGraph_t g,
                                               unsigned long long flags) {  // NOLINT
  return cudaGraphInstantiateWithFlags(e, g, flags);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) { return cudaGraphLaunch(e, s); }
// Updates `e` in place to `g`'s parameters where the two have the same nodes and edges.
inline hipError_t hipGraphExecUpdate(hipGraphExec_t e, hipGraph_t g) {
  cudaGraphExecUpdateResultInfo info;
  return cudaGraphExecUpdate(e, g, &info);
}
inline hipError_t hipGraphExecDestroy(hipGraphExec_t e) { return cudaGraphExecDestroy(e); }
inline hipError_t hipGraphDestroy(hipGraph_t g) { return cudaGraphDestroy(g); }
template <typename Kernel>
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel kernel,
                                                               int threads, size_t shared) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, shared);
}

#else
#error "hip_compat.h needs hipcc, nvcc, or CAIRN_HIP_PLATFORM_NVIDIA for the host compiler"
#endif

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_COMPAT_H_
