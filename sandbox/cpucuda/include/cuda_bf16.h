// Intercepts <cuda_bf16.h>: the runtime header already defines __nv_bfloat16 (cpucuda_bf16.h).
#pragma once
#include "cpucuda_runtime.h"
