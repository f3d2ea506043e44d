// Intercepts <cub/cub.cuh>: the block- and warp-wide collectives kernels use
// most (cub::WarpReduce, cub::BlockReduce, cub::BlockScan), written for the
// CPU executor on its shuffles and barriers. Results follow CUB's contract:
// a reduction's result is valid in thread (lane) 0; scans give every thread
// its prefix. As with CUB, reusing a TempStorage needs a __syncthreads()
// first (racecheck reports the race if it is missing).
#pragma once
#include "warp/warp_reduce.cuh"
#include "block/block_reduce.cuh"
#include "block/block_scan.cuh"
