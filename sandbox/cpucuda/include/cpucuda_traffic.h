// cpucuda_traffic.h: what the scheduler tells the traffic recorder (sandbox/cpucuda/traffic_recorder.cpp)
// in a traffic build (-DCPUCUDA_TRAFFIC=1), beyond cpucuda_hooks.h. Every call sits under #if CPUCUDA_TRAFFIC.
#pragma once

extern "C" {
void cpucuda_traffic_converge(int warp);       // a warp converged (-1: every warp: a __syncthreads)
void cpucuda_traffic_block_end(void);
void cpucuda_traffic_atomic(const void* p, unsigned size, void* pc);
// One warp-level MMA of m x n x k, called once per warp (from any one lane) by the tensor-core emulation.
void cpucuda_traffic_mma(int m, int n, int k);
}
