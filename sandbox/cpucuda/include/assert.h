// Intercepts <assert.h> (and so <cassert>): a failed device assert ends the
// launch with a CpuKernelError naming the condition, file, line and thread,
// instead of aborting the Python process.
#include "cpucuda_runtime.h"
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : ::cpucuda::device_assert_fail(#e, __FILE__, __LINE__))
#endif
