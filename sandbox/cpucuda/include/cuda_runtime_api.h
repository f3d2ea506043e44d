// Intercepts <cuda_runtime_api.h>: the runtime header already defines what kernels use from it.
#pragma once
#include "cpucuda_runtime.h"
