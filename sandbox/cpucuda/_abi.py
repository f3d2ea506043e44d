"""The C ABI shared by the parent process and the sanitizer child.

Kept free of NumPy and of package imports: ``_child.py`` imports it as a
top-level module so the child starts fast under the sanitizer runtime.
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
        ("poison", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("poison_seed", ctypes.c_uint64),
    ]


FLAG_STRICT = 1  # F_STRICT: racecheck where only __syncwarp orders lanes


def make_config(grid, block, shared_mem, stack_size, reverse, flags=0, poison=0, poison_seed=0):
    cfg = LaunchConfig()
    cfg.grid[:] = grid
    cfg.block[:] = block
    cfg.shared_mem = shared_mem
    cfg.stack_size = stack_size
    cfg.reverse = 1 if reverse else 0
    cfg.flags = flags
    cfg.poison = poison
    cfg.poison_seed = poison_seed
    return cfg


def launch_function(lib, index):
    """The ``int cpucuda_launch_<index>(void**, const LaunchConfig*, char*, size_t)`` entry."""
    fn = getattr(lib, f"cpucuda_launch_{index}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(LaunchConfig), ctypes.c_char_p, ctypes.c_size_t]
    return fn
