"""Child process of a sanitizer launch (see child.py). Not imported by the package.

Runs as ``python -B -S -E _child.py IN OUT PTRS`` with the sanitizer runtime
preloaded: reads the pickled launch from IN, copies each array into a malloc
of exactly its size (so ASan knows its bounds and TSan names the heap block),
writes the buffer addresses to PTRS (so the parent can name the argument a
report points into), fills the __constant__ variables the parent set,
launches, and pickles the written arrays and any runtime error to OUT. An
ASan error aborts this process before OUT is written; TSan reports races and
carries on. The parent reads reports from stderr. Only the standard library
is used: the child starts fast.
"""
import ctypes
import pickle
import sys

import _abi


def main(inp: str, out: str, ptrs: str) -> int:
    with open(inp, "rb") as f:
        job = pickle.load(f)
    lib = ctypes.CDLL(job["lib"])
    lib.cpucuda_malloc.restype = ctypes.c_void_p
    lib.cpucuda_malloc.argtypes = [ctypes.c_size_t]
    lib.cpucuda_constant.restype = ctypes.c_void_p
    lib.cpucuda_constant.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.cpucuda_last_dynamic_shared.restype = ctypes.c_void_p

    for name, data in job.get("constants", {}).items():
        size = ctypes.c_size_t()
        addr = lib.cpucuda_constant(name.encode(), ctypes.byref(size))
        if addr:
            ctypes.memmove(addr, data, min(len(data), size.value))

    buffers = {}  # buffer id -> (address, nbytes)
    for bid, data in job["buffers"].items():
        addr = lib.cpucuda_malloc(len(data))
        ctypes.memmove(addr, data, len(data))
        buffers[bid] = (addr, len(data))
    with open(ptrs, "w") as f:
        for bid, (addr, n) in buffers.items():
            f.write(f"{bid} {addr} {n}\n")

    n = len(job["args"])
    # 16 bytes per argument, 16-byte aligned (a cuDoubleComplex by value), as args.Packed lays them out
    slots = (ctypes.c_uint64 * (2 * max(n, 1) + 2))()
    base = ctypes.addressof(slots) + (-ctypes.addressof(slots)) % 16
    argv = (ctypes.c_void_p * max(n, 1))(*[base + 16 * i for i in range(max(n, 1))])
    for i, (kind, value) in enumerate(job["args"]):
        if kind == "buffer":
            ctypes.c_uint64.from_address(base + 16 * i).value = buffers[value][0]
        elif kind == "null":
            ctypes.c_uint64.from_address(base + 16 * i).value = 0
        else:  # raw little-endian bytes of a scalar
            ctypes.memmove(base + 16 * i, value, len(value))

    fn = _abi.launch_function(lib, job["entry"])
    cfg = _abi.make_config(*job["config"])
    err = ctypes.create_string_buffer(_abi.ERROR_BUFFER)
    rc = fn(argv, ctypes.byref(cfg), err, len(err))
    with open(ptrs, "a") as f:
        f.write(f"dyn {lib.cpucuda_last_dynamic_shared() or 0} {job['config'][2]}\n")
    written = {bid: ctypes.string_at(addr, size) for bid, (addr, size) in buffers.items() if bid in job["writable"]}
    with open(out, "wb") as f:
        pickle.dump({"rc": rc, "error": err.value.decode(errors="replace"), "buffers": written}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
