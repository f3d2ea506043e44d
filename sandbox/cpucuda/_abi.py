"""The C ABI and the message framing shared by the parent process and the sanitizer child.

Kept free of NumPy and of package imports: ``_child.py`` imports it as a
top-level module so the child starts fast under the sanitizer runtime.
"""
import ctypes
import os
import pickle
import struct

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


SLOT = 16  # bytes per argument: the largest by-value type (cuDoubleComplex), and its alignment


class Arguments:
    """``void* args[]`` for a launcher: one 16-byte, 16-byte-aligned slot per argument.

    A cuDoubleComplex (double2, aligned(16)) is read where the C++ side expects it.
    """

    def __init__(self, n: int):
        m = max(n, 1)
        self._raw = (ctypes.c_uint8 * (m * SLOT + SLOT))()
        self.base = ctypes.addressof(self._raw) + (-ctypes.addressof(self._raw)) % SLOT
        self.argv = (ctypes.c_void_p * m)(*[self.base + SLOT * i for i in range(m)])

    def set_pointer(self, i: int, address: int) -> None:
        ctypes.c_uint64.from_address(self.base + SLOT * i).value = address

    def set_struct(self, i: int, data: bytes) -> None:
        """argv[i] points at a 16-byte aligned buffer of its own: a struct passed by value outgrows a slot."""
        raw = (ctypes.c_uint8 * (len(data) + SLOT))()
        address = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % SLOT
        ctypes.memmove(address, data, len(data))
        self._structs = getattr(self, "_structs", []) + [raw]
        self.argv[i] = address

    def set_bytes(self, i: int, data: bytes) -> None:
        if len(data) > SLOT:
            raise ValueError(f"argument {i}: {len(data)} bytes do not fit a {SLOT}-byte slot")
        ctypes.memmove(self.base + SLOT * i, data, len(data))


# Messages between the parent and the sanitizer child: an 8-byte length, then a pickle.
MESSAGE_HEADER = struct.Struct("<Q")


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def receive(fd: int):
    """The next message on ``fd`` (blocking); None once the other end is closed."""
    head = _read_exact(fd, MESSAGE_HEADER.size)
    if head is None:
        return None
    body = _read_exact(fd, MESSAGE_HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def send(fd: int, message) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = MESSAGE_HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data):]
