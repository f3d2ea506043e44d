// Intercepts <cuda_device_runtime_api.h>: its types and the host API headers use come from cpucuda_host_api.h.
#pragma once
#include "cpucuda_runtime.h"
#include "cpucuda_host_api.h"
