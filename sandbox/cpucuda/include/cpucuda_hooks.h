// cpucuda_hooks.h: what the scheduler tells the recorder of an instrumented build (traffic mode:
// traffic_recorder.cpp, racecheck: race_checker.cpp; the kernel compiled with ThreadSanitizer's
// instrumentation feeding the recorder instead of libtsan). Every call sits under #if CPUCUDA_HOOKS;
// the mode's own hooks are in cpucuda_traffic.h and cpucuda_race.h.
#pragma once

#define CPUCUDA_HOOKS (CPUCUDA_TRAFFIC || CPUCUDA_RACE)

extern "C" {
void cpucuda_hook_block_begin(int64_t block, unsigned nthreads);  // block: linear, launch order
void cpucuda_hook_switch(int fiber);        // the fiber now running (-1: back in the scheduler)
void cpucuda_hook_shared(const void* p, size_t n, int dynamic);  // shared memory of this launch
}
