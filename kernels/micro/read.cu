// micro.read: each thread loads LOADS independent VECTOR_BYTES elements (unrolled, all issued before any is used),
// LOADS rounds of one coalesced, grid-wide sweep apart, and sums them. As gpu-benches' read kernel: the sum is
// stored only when it equals a value the data never holds, and a dynamic shared "spoiler" forces the resident
// blocks per SM (its size is chosen by the launcher).
template <int VECTOR_BYTES> struct Element;
template <> struct Element<4> {
    using T = float;
    __device__ static double sum(T v) { return v; }
};
template <> struct Element<8> {
    using T = double;
    __device__ static double sum(T v) { return v; }
};
template <> struct Element<16> {
    using T = double2;
    __device__ static double sum(T v) { return v.x + v.y; }
};

template <int VECTOR_BYTES, int LOADS>
__global__ void micro_read(const typename Element<VECTOR_BYTES>::T* __restrict__ data, double* __restrict__ sink,
                           long long elements, long long stride, int secretly_false) {
    extern __shared__ double spoiler[];
    using E = Element<VECTOR_BYTES>;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    typename E::T v[LOADS];
#pragma unroll
    for (int k = 0; k < LOADS; ++k) {
        const long long i = first + k * stride;
        if (i < elements) v[k] = data[i];
        else v[k] = typename E::T{};
    }
    double acc = 0.0;
#pragma unroll
    for (int k = 0; k < LOADS; ++k) acc += E::sum(v[k]);
    if (secretly_false) spoiler[threadIdx.x] = acc;
    if (secretly_false || acc == 123.0) sink[first] = acc + (secretly_false ? spoiler[threadIdx.x ^ 1] : 0.0);
}
