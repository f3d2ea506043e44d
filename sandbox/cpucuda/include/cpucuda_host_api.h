// cpucuda_host_api.h: the host side of CUDA's runtime API, as far as kernel headers use it.
//
// Production headers (FlashInfer's decode.cuh, CUTLASS, CCCL) hold host launch code beside their kernels:
// it must compile, but on the CPU the executor launches the kernels, so these functions only answer
// questions about "the device" and refuse everything else with cudaErrorNotSupported. Included by the
// <cuda_runtime.h>, <cuda_runtime_api.h>, <driver_types.h>, <cuda.h> and <cuda_device_runtime_api.h>
// stand-ins; the version macros follow the __CUDACC_VER_*__ the executor defines (compiler.py).
#pragma once
#ifndef CPUCUDA_HOST_API_H
#define CPUCUDA_HOST_API_H 1
#include "cpucuda_runtime.h"

#ifndef CUDA_VERSION
#define CUDA_VERSION (__CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10)
#endif

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                 cudaErrorInvalidDevice = 101, cudaErrorNotSupported = 801, cudaErrorUnknown = 999 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
typedef struct CUevent_st* cudaEvent_t;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMultiProcessorCount = 16,
                      cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
                      cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81 };
enum cudaLaunchAttributeID { cudaLaunchAttributeIgnore = 0, cudaLaunchAttributeClusterDimension = 4,
                             cudaLaunchAttributeProgrammaticStreamSerialization = 6 };
union cudaLaunchAttributeValue {
    char pad[64];
    int programmaticStreamSerializationAllowed;
    struct { unsigned int x, y, z; } clusterDim;
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute* attrs;
    unsigned int numAttrs;
};
// The fields kernel headers read, with an A100's values (the executor's __CUDA_ARCH__ is 800).
struct cudaDeviceProp {
    char name[256];
    int major = 8, minor = 0, multiProcessorCount = 108, warpSize = 32, maxThreadsPerBlock = 1024;
    size_t sharedMemPerBlock = 49152, sharedMemPerBlockOptin = 166912, sharedMemPerMultiprocessor = 167936;
    int l2CacheSize = 41943040;
};

namespace cpucuda_host {
inline int device_attribute(cudaDeviceAttr attr) {
    const cudaDeviceProp prop{};
    switch (attr) {
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: return (int)prop.sharedMemPerBlockOptin;
        case cudaDevAttrMultiProcessorCount: return prop.multiProcessorCount;
        case cudaDevAttrComputeCapabilityMajor: return prop.major;
        case cudaDevAttrComputeCapabilityMinor: return prop.minor;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: return (int)prop.sharedMemPerMultiprocessor;
    }
    return 0;
}
}  // namespace cpucuda_host

inline const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error"
         : e == cudaErrorNotSupported ? "operation not supported (sandbox.cpucuda launches kernels itself)"
         : "error";
}
inline const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaGetDeviceCount(int* count) { *count = 1; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    *prop = cudaDeviceProp{};
    strcpy(prop->name, "sandbox.cpucuda");
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    *value = cpucuda_host::device_attribute(attr);
    return cudaSuccess;
}
// Everything that would launch, allocate, copy or synchronise: the executor's business, not the header's.
template <typename... Args> inline cudaError_t cudaFuncSetAttribute(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaLaunchKernel(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaLaunchKernelEx(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaLaunchCooperativeKernel(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(Args...) {
    return cudaErrorNotSupported;
}
template <typename... Args> inline cudaError_t cudaOccupancyMaxPotentialClusterSize(Args...) {
    return cudaErrorNotSupported;
}
template <typename... Args> inline cudaError_t cudaMemcpyAsync(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaMemcpy(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaMemsetAsync(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaStreamSynchronize(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaDeviceSynchronize(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaMalloc(Args...) { return cudaErrorNotSupported; }
template <typename... Args> inline cudaError_t cudaFree(Args...) { return cudaErrorNotSupported; }

#endif  // CPUCUDA_HOST_API_H
