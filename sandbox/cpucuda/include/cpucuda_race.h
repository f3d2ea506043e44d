// cpucuda_race.h: what the scheduler tells the race checker (sandbox/cpucuda/race_checker.cpp) in a
// racecheck build (-DCPUCUDA_RACE=1, the kernel compiled with ThreadSanitizer's instrumentation feeding
// the checker instead of libtsan). Every call sits under #if CPUCUDA_RACE. Threads are the block's
// linear thread indices; the calls come from the scheduler, between fibers.
#pragma once

extern "C" {
void cpucuda_race_block_begin(int64_t block, unsigned nthreads);  // block: linear; nothing before it can race
void cpucuda_race_switch(int fiber);                         // the fiber now running (-1: back in the scheduler)
void cpucuda_race_barrier(void);                             // a __syncthreads was released
void cpucuda_race_warp(unsigned warp, unsigned lanes);       // a warp operation that orders `lanes` was released
void cpucuda_race_tile(unsigned first, unsigned size);       // a tile barrier of threads [first, first + size) released
void cpucuda_race_shared(const void* p, size_t n, int dynamic);  // shared memory of this launch
}
