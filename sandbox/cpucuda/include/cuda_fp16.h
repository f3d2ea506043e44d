// Intercepts <cuda_fp16.h>: the runtime header already defines __half.
#pragma once
#include "cpucuda_runtime.h"
