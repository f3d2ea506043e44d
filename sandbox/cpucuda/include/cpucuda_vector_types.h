// cpucuda_vector_types.h: CUDA's vector types (float4, int2, ...) with the
// alignment CUDA gives them, so 16-byte vector loads through
// reinterpret_cast<const float4*> demand the same alignment as on a GPU.
// The alignments mirror CUDA's vector_types.h: 3-vectors take the scalar's.
#pragma once

// T1..T4 of scalar T (e.g. float1..float4) with alignments A1..A4, and make_T1..make_T4.
#define CPUCUDA_VECTOR_FAMILY(NAME, T, A1, A2, A3, A4)                                                       \
  struct __attribute__((aligned(A1))) NAME##1 { T x; };                                                       \
  struct __attribute__((aligned(A2))) NAME##2 { T x; T y; };                                                  \
  struct __attribute__((aligned(A3))) NAME##3 { T x; T y; T z; };                                             \
  struct __attribute__((aligned(A4))) NAME##4 { T x; T y; T z; T w; };                                        \
  static inline constexpr NAME##1 make_##NAME##1(T x) { return NAME##1{x}; }                                 \
  static inline constexpr NAME##2 make_##NAME##2(T x, T y) { return NAME##2{x, y}; }                         \
  static inline constexpr NAME##3 make_##NAME##3(T x, T y, T z) { return NAME##3{x, y, z}; }                 \
  static inline constexpr NAME##4 make_##NAME##4(T x, T y, T z, T w) { return NAME##4{x, y, z, w}; }

CPUCUDA_VECTOR_FAMILY(char, char, 1, 2, 1, 4)
CPUCUDA_VECTOR_FAMILY(uchar, unsigned char, 1, 2, 1, 4)
CPUCUDA_VECTOR_FAMILY(short, short, 2, 4, 2, 8)
CPUCUDA_VECTOR_FAMILY(ushort, unsigned short, 2, 4, 2, 8)
CPUCUDA_VECTOR_FAMILY(int, int, 4, 8, 4, 16)
CPUCUDA_VECTOR_FAMILY(uint, unsigned int, 4, 8, 4, 16)
CPUCUDA_VECTOR_FAMILY(long, long, 8, 16, 8, 16)
CPUCUDA_VECTOR_FAMILY(ulong, unsigned long, 8, 16, 8, 16)
CPUCUDA_VECTOR_FAMILY(longlong, long long, 8, 16, 8, 16)
CPUCUDA_VECTOR_FAMILY(ulonglong, unsigned long long, 8, 16, 8, 16)
CPUCUDA_VECTOR_FAMILY(float, float, 4, 8, 4, 16)
CPUCUDA_VECTOR_FAMILY(double, double, 8, 16, 8, 16)
#undef CPUCUDA_VECTOR_FAMILY

// CUDA 13's explicitly aligned 4-vectors of 8-byte elements (the executor reports CUDA 13, compiler.py).
#define CPUCUDA_VECTOR4_ALIGNED(NAME, T, A) \
    struct alignas(A) NAME { T x, y, z, w; };
CPUCUDA_VECTOR4_ALIGNED(double4_16a, double, 16)
CPUCUDA_VECTOR4_ALIGNED(double4_32a, double, 32)
CPUCUDA_VECTOR4_ALIGNED(longlong4_16a, long long, 16)
CPUCUDA_VECTOR4_ALIGNED(longlong4_32a, long long, 32)
CPUCUDA_VECTOR4_ALIGNED(ulonglong4_16a, unsigned long long, 16)
CPUCUDA_VECTOR4_ALIGNED(ulonglong4_32a, unsigned long long, 32)
CPUCUDA_VECTOR4_ALIGNED(long4_16a, long, 16)
CPUCUDA_VECTOR4_ALIGNED(long4_32a, long, 32)
CPUCUDA_VECTOR4_ALIGNED(ulong4_16a, unsigned long, 16)
CPUCUDA_VECTOR4_ALIGNED(ulong4_32a, unsigned long, 32)
#undef CPUCUDA_VECTOR4_ALIGNED

// dim3 is uint3 with constructors defaulting to 1 (blockDim, gridDim).
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

