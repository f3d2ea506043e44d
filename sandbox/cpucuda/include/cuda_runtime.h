// Intercepts <cuda_runtime.h>: the runtime header already defines what kernels use from it.
#pragma once
#include "cpucuda_runtime.h"
