"""The C ABI shared by the parent process and the ASan child.

Kept free of NumPy and of package imports: ``_asan_child.py`` imports it as a
top-level module so the child starts fast under the ASan runtime.
"""
import ctypes

ERROR_BUFFER = 4096


class LaunchConfig(ctypes.Structure):
    """Mirror of ``cpucuda::LaunchConfig`` in include/cpucuda_sched.h."""

    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("shared_mem", ctypes.c_uint64),
        ("stack_size", ctypes.c_uint64),
        ("reverse", ctypes.c_int32),
        ("flags", ctypes.c_int32),
    ]


def make_config(grid, block, shared_mem, stack_size, reverse):
    cfg = LaunchConfig()
    cfg.grid[:] = grid
    cfg.block[:] = block
    cfg.shared_mem = shared_mem
    cfg.stack_size = stack_size
    cfg.reverse = 1 if reverse else 0
    return cfg


def launch_function(lib, index):
    """The ``int cpucuda_launch_<index>(void**, const LaunchConfig*, char*, size_t)`` entry."""
    fn = getattr(lib, f"cpucuda_launch_{index}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(LaunchConfig), ctypes.c_char_p, ctypes.c_size_t]
    return fn
