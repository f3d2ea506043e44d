// cpucuda_runtime.h: CUDA's built-ins for g++, force-included (-include) before
// every kernel source compiled by sandbox.cpucuda. One translation unit per
// shared object, so everything here has internal linkage or is inline.
#pragma once
#ifndef CPUCUDA_RUNTIME_H  // a guard as well: #pragma once does not survive a precompiled header everywhere
#define CPUCUDA_RUNTIME_H 1

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The C++ standard headers a CUDA translation unit gets without asking: nvcc's
// host headers pull them in (cuda_runtime.h -> <cmath>, <cstdlib>, <new>, ...,
// libstdc++'s own <cmath> -> <type_traits>), and real kernels use std::tuple,
// std::pair, std::numeric_limits or std::is_same without including anything.
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

// Execution-space and optimisation qualifiers: meaningless on the CPU.
#define __global__
#define __device__
#define __host__
#define __constant__  // rewritten: each __constant__ variable also registers itself (see get_global)
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
#define __grid_constant__
// The runtime's version, as nvcc's pre-included cuda_runtime.h defines it (the compiler's, compiler.py).
#ifndef CUDART_VERSION
#define CUDART_VERSION (__CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10)
#endif
// nvcc's (and clang's) optimiser hint; g++ has none, and the hint must not evaluate its argument twice.
#define __builtin_assume(e) ((void)sizeof(e))
// `__shared__` declarations are rewritten by sandbox.cpucuda before g++ sees
// them; one that escaped the rewrite (for example from a macro) fails here
// with this name in the error instead of silently becoming a per-thread local.
#define __shared__ __cpucuda_unrewritten_shared_declaration

#include "cpucuda_vector_types.h"
#include "cpucuda_half.h"
#include "cpucuda_bf16.h"
#include "cpucuda_math.h"
#include "cpucuda_sched.h"
#include "cpucuda_device.h"
#include "cpucuda_ptx.h"
#include "cpucuda_launch.h"
// NVRTC offers assert() without an include; so do we (ours: see assert.h).
#include "assert.h"

// Python looks up __constant__ variables (CpuRawModule.get_global) and, for
// racecheck reports, the heap block that held dynamic shared memory.
CPUCUDA_EXPORT CPUCUDA_RUNTIME void* cpucuda_constant(const char* name, size_t* size) {
    for (unsigned i = 0; i < cpucuda::g_nconstants; ++i)
        if (strcmp(cpucuda::g_constants[i].name, name) == 0) {
            *size = cpucuda::g_constants[i].n;
            return cpucuda::g_constants[i].p;
        }
    return nullptr;
}
CPUCUDA_EXPORT CPUCUDA_RUNTIME const char* cpucuda_constant_name(unsigned i) {
    return i < cpucuda::g_nconstants ? cpucuda::g_constants[i].name : nullptr;
}
// The next launch's argument arrays: n (address, bytes) pairs (see gpu_aligned in cpucuda_sched.h).
CPUCUDA_EXPORT CPUCUDA_RUNTIME void cpucuda_set_buffers(const uint64_t* pairs, unsigned n) {
    cpucuda::g_buffers = (cpucuda::Buffer*)realloc(cpucuda::g_buffers, (n ? n : 1) * sizeof(cpucuda::Buffer));
    for (unsigned i = 0; i < n; ++i) cpucuda::g_buffers[i] = cpucuda::Buffer{(uintptr_t)pairs[2 * i], (size_t)pairs[2 * i + 1]};
    cpucuda::g_nbuffers = n;
}

#endif  // CPUCUDA_RUNTIME_H
