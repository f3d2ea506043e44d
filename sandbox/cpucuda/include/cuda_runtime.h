// Intercepts <cuda_runtime.h>: the runtime header defines what kernels use from it, cpucuda_host_api.h the host API headers use.
#pragma once
#include "cpucuda_runtime.h"
#include "cpucuda_host_api.h"
