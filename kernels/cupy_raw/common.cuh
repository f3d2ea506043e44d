// common.cuh: what the CUDA C paged-attention variants share (kernels/cupy_raw/*.cu), in focused headers:
//   warp.cuh        thread counts, warp-level reductions
//   codecs.cuh      cache element formats (fp8, NVFP4) and the vectors loaded from them (CacheVec)
//   options.cuh     the attention options: Options<FLAGS>, the score hook's context (ScoreAt)
//   kv_access.cuh   token -> cache row (PagedKV, DenseKV), HeadTile, the per-token K and V steps
//   rows.cuh        the row mapping (cupy.rows's idea)
//   attend.cuh      attend(): one block's attention over a token range (cupy.v1, v2, gqa, rows, dense)
//   reductions.cuh  the split-KV reduce kernel
// A variant includes this file (or only the headers it needs).
#pragma once
#include "attend.cuh"
#include "reductions.cuh"
