// Intercepts <cooperative_groups.h>, which this executor does not model.
#error "sandbox.cpucuda does not support cooperative_groups; use __syncthreads and the __*_sync warp intrinsics"
