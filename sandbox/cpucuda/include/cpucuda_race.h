// cpucuda_race.h: what the scheduler tells the race checker (sandbox/cpucuda/race_checker.cpp) in a
// racecheck build (-DCPUCUDA_RACE=1), beyond cpucuda_hooks.h: what orders memory in CUDA. Every call
// sits under #if CPUCUDA_RACE and comes from the scheduler, between fibers. Threads are the block's
// linear thread indices.
#pragma once

extern "C" {
void cpucuda_race_barrier(void);                             // a __syncthreads was released
void cpucuda_race_warp(unsigned warp, unsigned lanes);       // a warp operation that orders `lanes` was released
void cpucuda_race_tile(unsigned first, unsigned size);       // a tile barrier of threads [first, first + size) released
}
