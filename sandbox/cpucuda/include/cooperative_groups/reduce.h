// Intercepts <cooperative_groups/reduce.h>: cg::reduce over a tile or a
// coalesced group, with cg::plus, cg::less (minimum), cg::greater (maximum)
// and the bitwise operators. Every lane of the group gets the result.
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

}  // namespace cooperative_groups
