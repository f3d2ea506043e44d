"""Child process of the sanitizer launches (see child.py). Not imported by the package.

Runs as ``python -B -S -E _child.py CMD_FD REPLY_FD`` with the sanitizer runtime preloaded and
serves launches until its command pipe closes. Each command is a length-prefixed pickle: a
launch names the shared object, the entry, the arguments and where each array lies in the
arena (a file mapped by both processes). Each array is first copied into a malloc of exactly
its size, so a one-past-the-end access is caught, and the written ones are copied back. The
reply gives the buffer addresses (the parent names the argument a report points into), the
runtime's return code and message.

Libraries stay loaded and keep their fibers. Reports go to stderr (a file the parent reads
after each launch); an ASan error aborts this process, which the parent sees as the reply
pipe closing. Only the standard library is used: the child starts fast.
"""
import ctypes
import mmap
import sys

import _abi

class Server:
    """What stays alive between launches: libraries and the arena mapping."""

    def __init__(self, reply_fd: int):
        self.reply_fd = reply_fd
        self.libs = {}
        self.last = None  # the library whose fiber stacks are mapped
        self.arena_path, self.arena = None, None
        self.libc = ctypes.CDLL(None)

    def library(self, path: str):
        lib = self.libs.get(path)
        if lib is None:
            lib = ctypes.CDLL(path)
            lib.cpucuda_malloc.restype = ctypes.c_void_p
            lib.cpucuda_malloc.argtypes = [ctypes.c_size_t]
            lib.cpucuda_free.argtypes = [ctypes.c_void_p]
            lib.cpucuda_constant.restype = ctypes.c_void_p
            lib.cpucuda_constant.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
            lib.cpucuda_set_buffers.argtypes = [ctypes.c_void_p, ctypes.c_uint]
            self.libs[path] = lib
        if self.last is not None and self.last is not lib:
            self.last.cpucuda_release()  # two memory mappings per fiber stack: keep one library's
        self.last = lib
        return lib

    def map_arena(self, path: str, size: int) -> int:
        if path != self.arena_path or self.arena is None or len(self.arena) < size:
            if self.arena is not None:
                self.arena.close()
            with open(path, "r+b") as f:
                self.arena = mmap.mmap(f.fileno(), size)
            self.arena_path = path
        return ctypes.addressof(ctypes.c_char.from_buffer(self.arena))

    def launch(self, job: dict) -> dict:
        lib = self.library(job["lib"])
        for name, data in job["constants"].items():
            size = ctypes.c_size_t()
            addr = lib.cpucuda_constant(name.encode(), ctypes.byref(size))
            if addr:
                ctypes.memmove(addr, data, min(len(data), size.value))
        base = self.map_arena(job["arena"], job["arena_size"]) if job["buffers"] else 0
        buffers = {}  # buffer id -> (address the kernel sees, nbytes)
        for bid, (offset, n) in job["buffers"].items():  # an exact-size malloc: ASan bounds it
            addr = lib.cpucuda_malloc(n or 1)
            ctypes.memmove(addr, base + offset, n)
            buffers[bid] = (addr, n)
        pairs = [v for addr, n in buffers.values() for v in (addr, n)]
        lib.cpucuda_set_buffers((ctypes.c_uint64 * max(len(pairs), 1))(*pairs), len(buffers))
        # Before the launch: an ASan error ends this process, and the parent needs them to name the argument.
        _abi.send(self.reply_fd, {"addresses": buffers})
        argv = _abi.Arguments(len(job["args"]))
        for i, (kind, value) in enumerate(job["args"]):
            if kind == "buffer":
                argv.set_pointer(i, buffers[value][0])
            elif kind == "null":
                argv.set_pointer(i, 0)
            elif kind == "struct":  # its bytes, each pointer field set to its buffer here (None: NULL)
                data, fields = value
                data = bytearray(data)
                for offset, bid in fields:
                    data[offset:offset + 8] = (buffers[bid][0] if bid is not None else 0).to_bytes(8, "little")
                argv.set_struct(i, bytes(data))
            else:  # raw little-endian bytes of a scalar
                argv.set_bytes(i, value)
        config = job["config"]
        fn = _abi.launch_function(lib, job["entry"])
        cfg = _abi.make_config(*config)
        err = ctypes.create_string_buffer(_abi.ERROR_BUFFER)
        rc = fn(argv.argv, ctypes.byref(cfg), err, len(err))
        self.libc.fflush(None)  # the kernel's printf reaches the file before the parent reads it
        for bid, (offset, n) in job["buffers"].items():
            addr = buffers[bid][0]
            if bid in job["writable"]:
                ctypes.memmove(base + offset, addr, n)
            lib.cpucuda_free(addr)
        return {"rc": rc, "error": err.value.decode(errors="replace")}


def main(cmd_fd: int, reply_fd: int) -> int:
    server = Server(reply_fd)
    while True:
        job = _abi.receive(cmd_fd)
        if job is None:  # the parent closed the pipe (or exited)
            return 0
        _abi.send(reply_fd, {"pong": True} if job.get("ping") else server.launch(job))


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
