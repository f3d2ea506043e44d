// Intercepts <mma.h>: CUDA's warp-level matrix multiply-accumulate, nvcuda::wmma, on the CPU.
//
// fragment<matrix_a | matrix_b | accumulator, M, N, K, T, layout> at m16n16k16, m32n8k16 and
// m8n32k16; matrix_a / matrix_b of __half or __nv_bfloat16 (row_major or col_major), accumulators
// of float (either input) or __half (__half inputs). fill_fragment, load_matrix_sync (with ldm;
// accumulators with mem_row_major / mem_col_major), store_matrix_sync, mma_sync (satf too).
//
// Warp-collective as on a GPU: load, store and mma wait until all 32 lanes of the warp arrive at
// the same call with the same pointer, ldm and layout (a lane that passes another, a partial
// warp, or lanes that never arrive are reported with the line). The pointer must be 256-bit
// (32-byte) aligned and ldm a multiple of 16 bytes, as CUDA requires.
//
// Element mapping (unspecified in CUDA; code must not depend on it): a fragment holds its
// matrix (M x K for matrix_a, K x N for matrix_b, M x N for the accumulator) in num_elements =
// rows * cols / 32 elements per lane; element x[e] of lane L is the matrix element whose
// row-major index r * cols + c is 32 * e + L, whatever the fragment's layout.
//
// Alignment is judged as a GPU would see it: a pointer into an argument array by its offset from
// the array's start (cudaMalloc's arrays are 256-byte aligned, NumPy's only 16), shared memory
// (256-bit aligned here) and anything else by its address.
//
// Arithmetic: D[i][j] = C[i][j] + sum over k = 0, 1, ..., K-1 of A[i][k] * B[k][j], in float:
// every product is exact (11 x 11 or 8 x 8 significand bits fit a float), and the sum is
// accumulated in that order, rounding to nearest after each addition; a __half accumulator is
// widened to float first and rounded to __half once at the end. Tensor cores add the products
// of a k-step in a different order and with wider or truncated intermediate sums, so results
// can differ from a GPU's in the last bits of a float (more for long K chains of cancelling
// terms); the products themselves never differ.
#pragma once
#include "cpucuda_runtime.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

template <class Use, int M, int N, int K> struct shape;
template <int M, int N, int K> struct shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <int M, int N, int K>
constexpr bool supported_shape = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                                 (M == 8 && N == 32 && K == 16);

template <class Use, class T, class Layout>
constexpr bool supported_type =
    std::is_same<Use, accumulator>::value
        ? (std::is_same<T, float>::value || std::is_same<T, __half>::value) && std::is_same<Layout, void>::value
        : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) &&
              (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value);

static inline float widen(float v) { return v; }
static inline float widen(__half v) { return __half2float(v); }
static inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> static inline T narrow(float v);
template <> inline float narrow<float>(float v) { return v; }
template <> inline __half narrow<__half>(float v) { return __float2half_rn(v); }

// Checks a GPU would fail on (misaligned address) or that CUDA states as a requirement. Alignment is
// judged as on a GPU: by the offset into an argument array (cudaMalloc's are 256-byte aligned).
template <class T>
static inline void check_memory(const void* p, unsigned ldm, const char* what, const char* file, int line) {
    if (!cpucuda::gpu_aligned(p, 32))
        cpucuda::fiber_fail("%s at %s:%d: mptr %p is not 256-bit (32-byte) aligned, as CUDA requires, in %s", what,
                            file, line, p, cpucuda::where(cpucuda::g.cur));
    if ((ldm * sizeof(T)) % 16)
        cpucuda::fiber_fail("%s at %s:%d: ldm %u must be a multiple of %u for %u-byte elements (16 bytes), in %s",
                            what, file, line, ldm, (unsigned)(16 / sizeof(T)), (unsigned)sizeof(T),
                            cpucuda::where(cpucuda::g.cur));
}

// The warp's rendezvous for a load or store: every lane must pass the same pointer, ldm and layout.
static inline void agree(const char* what, const void* p, unsigned ldm, int layout, const char* file, int line) {
    cpucuda::Collective c{3, {(uint64_t)(uintptr_t)p, ldm, (uint64_t)layout, 0}, {"pointer", "ldm", "layout", ""},
                          nullptr, nullptr};
    cpucuda::warp_collective(&c, what, file, line);
}

static inline unsigned lane() { return cpucuda::g.cur->lane; }

}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(detail::supported_shape<M, N, K>,
                  "wmma::fragment on sandbox.cpucuda: shapes m16n16k16, m32n8k16 and m8n32k16");
    static_assert(detail::supported_type<Use, T, Layout>,
                  "wmma::fragment on sandbox.cpucuda: matrix_a / matrix_b of __half or __nv_bfloat16 with row_major or "
                  "col_major, accumulators of float or __half without a layout");

  public:
    using element_type = T;
    using storage_element_type = T;
    static constexpr int rows = detail::shape<Use, M, N, K>::rows;
    static constexpr int cols = detail::shape<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols / 32;
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L, class V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& value) {
    const T v = (T)value;
    for (int e = 0; e < f.num_elements; ++e) f.x[e] = v;
}

namespace detail {
// Each lane moves its own elements, after the warp has agreed (so the accesses are the lanes').
template <class Frag, class T>
static inline void load(Frag& f, const T* p, unsigned ldm, bool row_major_memory) {
    const unsigned l = lane();
    for (int e = 0; e < Frag::num_elements; ++e) {
        const int idx = 32 * e + (int)l, r = idx / Frag::cols, c = idx % Frag::cols;
        f.x[e] = p[row_major_memory ? (size_t)r * ldm + c : (size_t)c * ldm + r];
    }
}
template <class Frag, class T>
static inline void store(const Frag& f, T* p, unsigned ldm, bool row_major_memory) {
    const unsigned l = lane();
    for (int e = 0; e < Frag::num_elements; ++e) {
        const int idx = 32 * e + (int)l, r = idx / Frag::cols, c = idx % Frag::cols;
        p[row_major_memory ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[e];
    }
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* mptr, unsigned ldm, CPUCUDA_SITE) {
    static_assert(!std::is_same<Use, accumulator>::value,
                  "load_matrix_sync of an accumulator takes the memory layout (mem_row_major or mem_col_major)");
    detail::check_memory<T>(mptr, ldm, "load_matrix_sync", cpucuda_file, cpucuda_line);
    const bool rm = std::is_same<L, row_major>::value;
    detail::agree("load_matrix_sync", mptr, ldm, rm ? 0 : 1, cpucuda_file, cpucuda_line);
    detail::load(f, mptr, ldm, rm);
}

template <int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* mptr, unsigned ldm,
                                    layout_t layout, CPUCUDA_SITE) {
    detail::check_memory<T>(mptr, ldm, "load_matrix_sync", cpucuda_file, cpucuda_line);
    detail::agree("load_matrix_sync", mptr, ldm, (int)layout, cpucuda_file, cpucuda_line);
    detail::load(f, mptr, ldm, layout == mem_row_major);
}

template <int M, int N, int K, class T>
static inline void store_matrix_sync(T* mptr, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                                     layout_t layout, CPUCUDA_SITE) {
    detail::check_memory<T>(mptr, ldm, "store_matrix_sync", cpucuda_file, cpucuda_line);
    detail::agree("store_matrix_sync", mptr, ldm, (int)layout, cpucuda_file, cpucuda_line);
    detail::store(f, mptr, ldm, layout == mem_row_major);
}

namespace detail {
template <class FD, class FA, class FB, class FC> struct MmaOperands {
    FD* d;
    const FA* a;
    const FB* b;
    const FC* c;
    bool satf;
};

template <class T> static inline T saturate(float v) {
    const float big = std::is_same<T, float>::value ? FLT_MAX : 65504.0f;
    if (v != v) return narrow<T>(0.0f);
    return narrow<T>(v > big ? big : v < -big ? -big : v);
}

// The whole warp's D = A * B + C, run once by the scheduler when all 32 lanes have arrived: every
// lane's A, B and C are read before any D is written (D may be C).
template <int M, int N, int K, class FD, class FA, class FB, class FC>
CPUCUDA_RUNTIME static void mma_warp(void* const* lane_data) {
#if CPUCUDA_TRAFFIC
    cpucuda_traffic_mma(M, N, K);  // once per warp: the recorder's tensor-core instruction and FLOP counts
#endif
    float a[M * K], b[K * N], acc[M * N];
    for (int l = 0; l < 32; ++l) {
        const auto* op = static_cast<const MmaOperands<FD, FA, FB, FC>*>(lane_data[l]);
        for (int e = 0; e < FA::num_elements; ++e) a[32 * e + l] = widen(op->a->x[e]);
        for (int e = 0; e < FB::num_elements; ++e) b[32 * e + l] = widen(op->b->x[e]);
        for (int e = 0; e < FC::num_elements; ++e) acc[32 * e + l] = widen(op->c->x[e]);
    }
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float s = acc[i * N + j];
            for (int k = 0; k < K; ++k) s += a[i * K + k] * b[k * N + j];  // exact product, one rounding per add
            acc[i * N + j] = s;
        }
    const bool satf = static_cast<const MmaOperands<FD, FA, FB, FC>*>(lane_data[0])->satf;
    using TD = typename FD::element_type;
    for (int l = 0; l < 32; ++l) {
        auto* op = static_cast<const MmaOperands<FD, FA, FB, FC>*>(lane_data[l]);
        for (int e = 0; e < FD::num_elements; ++e)
            op->d->x[e] = satf ? saturate<TD>(acc[32 * e + l]) : narrow<TD>(acc[32 * e + l]);
    }
}
}  // namespace detail

template <int M, int N, int K, class TA, class LA, class LB, class TC, class TD>
static inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                            const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                            bool satf = false, CPUCUDA_SITE) {
    static_assert(std::is_same<TC, TD>::value, "mma_sync: C and D accumulators of one type");
    static_assert(std::is_same<TA, __half>::value || std::is_same<TD, float>::value,
                  "mma_sync: __nv_bfloat16 inputs accumulate in float (as in CUDA)");
    using FD = fragment<accumulator, M, N, K, TD>;
    using FA = fragment<matrix_a, M, N, K, TA, LA>;
    using FB = fragment<matrix_b, M, N, K, TA, LB>;
    using FC = fragment<accumulator, M, N, K, TC>;
    detail::MmaOperands<FD, FA, FB, FC> ops{&d, &a, &b, &c, satf};
    cpucuda::Collective coll{1, {(uint64_t)satf, 0, 0, 0}, {"satf", "", "", ""}, &ops,
                             &detail::mma_warp<M, N, K, FD, FA, FB, FC>};
    cpucuda::warp_collective(&coll, "mma_sync", cpucuda_file, cpucuda_line);
}

}  // namespace wmma
}  // namespace nvcuda
