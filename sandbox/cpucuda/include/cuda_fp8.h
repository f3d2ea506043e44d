// Intercepts <cuda_fp8.h>: fp8 types and conversions for the CPU executor (cpucuda_fp8.h).
#pragma once
#include "cpucuda_runtime.h"
#include "cpucuda_fp8.h"
