// Intercepts <cooperative_groups/reduce.h>: cg::reduce over a tile (of up to
// 1024 threads) or a coalesced group, with cg::plus, cg::less (minimum),
// cg::greater (maximum) and the bitwise operators. Every thread of the group
// gets the result.
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

// A tile (power-of-two size): xor butterfly. Any other group: every lane
// gathers the values of all ranks in rank order (size <= 32).
template <class T, class Op>
static inline T reduce(const coalesced_group& g, T value, Op op, CPUCUDA_SITE) {
    const unsigned n = (unsigned)g.size();
    if ((n & (n - 1)) == 0) {  // shfl_xor works on ranks, so any lane set of this size will do
        for (unsigned m = n / 2; m >= 1; m /= 2) value = op(value, g.shfl_xor(value, m, cpucuda_file, cpucuda_line));
        return value;
    }
    T acc = g.shfl(value, 0, cpucuda_file, cpucuda_line);
    for (unsigned r = 1; r < n; ++r) acc = op(acc, g.shfl(value, r, cpucuda_file, cpucuda_line));
    return acc;
}

namespace details {
// Tiles wider than a warp: every thread writes its value to the tile's slots, a tile barrier, every
// thread combines all of them in the order a butterfly over the ranks would (so every thread gets
// the same result), and a second barrier before the slots can be written again.
alignas(16) static unsigned char tile_slots[1024][64];
}  // namespace details

template <unsigned N, class P, class T, class Op>
static inline T reduce(const thread_block_tile<N, P>& g, T value, Op op, CPUCUDA_SITE) {
    if constexpr (N <= 32) {
        return reduce(static_cast<const coalesced_group&>(g), value, op, cpucuda_file, cpucuda_line);
    } else {
        static_assert(sizeof(T) <= sizeof(details::tile_slots[0]), "cg::reduce over a tile wider than a warp: "
                      "values of at most 64 bytes on sandbox.cpucuda");
        const unsigned first = details::block_rank() - (unsigned)g.thread_rank();
        memcpy(details::tile_slots[details::block_rank()], &value, sizeof(T));
        g.sync(cpucuda_file, cpucuda_line);
        T vals[N];
        for (unsigned r = 0; r < N; ++r) memcpy((void*)&vals[r], details::tile_slots[first + r], sizeof(T));
        for (unsigned m = N / 2; m >= 1; m /= 2)
            for (unsigned r = 0; r < m; ++r) vals[r] = op(vals[r], vals[r + m]);
        g.sync(cpucuda_file, cpucuda_line);
        return vals[0];
    }
}

}  // namespace cooperative_groups
