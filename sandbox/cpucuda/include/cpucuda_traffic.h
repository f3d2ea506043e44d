// cpucuda_traffic.h: what the scheduler tells the traffic recorder (sandbox/cpucuda/traffic_recorder.cpp)
// in a traffic build (-DCPUCUDA_TRAFFIC=1, the kernel compiled with ThreadSanitizer's instrumentation
// feeding the recorder instead of libtsan). Every call sits under #if CPUCUDA_TRAFFIC.
#pragma once

extern "C" {
void cpucuda_traffic_block_begin(int64_t block, unsigned nthreads);  // block: linear, launch order
void cpucuda_traffic_switch(int fiber);        // the fiber now running (-1: back in the scheduler)
void cpucuda_traffic_converge(int warp);       // a warp converged (-1: every warp: a __syncthreads)
void cpucuda_traffic_block_end(void);
void cpucuda_traffic_shared(const void* p, size_t n, int dynamic);  // shared memory of this launch
void cpucuda_traffic_atomic(const void* p, unsigned size, void* pc);
// One warp-level MMA of m x n x k, called once per warp (from any one lane) by the tensor-core emulation.
void cpucuda_traffic_mma(int m, int n, int k);
}
