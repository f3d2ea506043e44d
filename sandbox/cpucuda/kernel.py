"""CpuRawKernel and CpuRawModule: cupy.RawKernel / cupy.RawModule on the CPU."""
from __future__ import annotations

import ctypes
import os
import re
import threading

from . import _abi
from . import args as _args
from . import compiler as _compiler
from .errors import CpuKernelError, CpuKernelMemoryError
from .source import find_kernels

# One launch at a time per process: the runtime in each shared object keeps
# its scheduler state in globals (ctypes releases the GIL during the call).
_LAUNCH_LOCK = threading.Lock()
_LIBS: dict[str, ctypes.CDLL] = {}
_last_lib: list = [None]  # the library whose fiber stacks are mapped (see cpucuda_release)
_ORDERS = ("forward", "reverse")
_MAX_DEFAULT_DYNAMIC_SMEM = 48 * 1024  # above this CUDA wants the kernel attribute raised
_MAX_DYNAMIC_SMEM = 227 * 1024  # sm_90's opt-in limit per block


def _load(path) -> ctypes.CDLL:
    key = str(path)
    lib = _LIBS.get(key)
    if lib is None:
        lib = _LIBS[key] = ctypes.CDLL(key, mode=os.RTLD_LOCAL)
    return lib


def default_thread_order() -> str:
    """``SANDBOX_CPUCUDA_ORDER`` (forward|reverse), read at each launch."""
    order = os.environ.get("SANDBOX_CPUCUDA_ORDER", "forward")
    if order not in _ORDERS:
        raise ValueError(f"SANDBOX_CPUCUDA_ORDER={order!r}: use one of {_ORDERS}")
    return order


def default_asan() -> bool:
    """``SANDBOX_CPUCUDA_ASAN=1`` runs every launch under AddressSanitizer."""
    return os.environ.get("SANDBOX_CPUCUDA_ASAN", "").lower() in ("1", "true", "yes", "on")


def _resolve_asan(asan, sanitize):
    """``sanitize="address"`` is an alias of ``asan=True``."""
    if sanitize in (None, "", "none"):
        return asan
    if sanitize != "address":
        raise ValueError(f"sanitize={sanitize!r}: only 'address' (AddressSanitizer) is supported")
    return True


def stack_size(asan: bool) -> int:
    """Bytes per fiber stack: ``SANDBOX_CPUCUDA_STACK_KB`` (default 256; x4 under ASan)."""
    kib = int(os.environ.get("SANDBOX_CPUCUDA_STACK_KB", "256"))
    return kib * 1024 * (4 if asan else 1)


def _dims(value, what: str, limits) -> tuple[int, int, int]:
    if isinstance(value, (int,)) or hasattr(value, "__index__"):
        value = (value,)
    try:
        dims = [int(v.__index__()) for v in value]
    except (TypeError, AttributeError):
        raise TypeError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    dims += [1] * (3 - len(dims))
    for d, limit in zip(dims, limits):
        if not 1 <= d <= limit:
            raise ValueError(f"{what} {tuple(dims)}: each dimension must be in 1..{limit} ({limits})")
    return tuple(dims)


class _Program:
    """Source and options, compiled on demand for a growing set of kernel names."""

    def __init__(self, code: str, options, names):
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of CUDA C source, got {type(code).__name__}")
        self.code = code
        self.options = tuple(options) if not isinstance(options, str) else (options,)
        self.names = list(dict.fromkeys(names))
        self._builds: dict[str, _compiler.Build] = {}
        self._lock = threading.Lock()

    def add(self, name: str) -> None:
        with self._lock:
            if name not in self.names:
                self.names.append(name)
                self._builds.clear()

    def build(self, mode: str) -> _compiler.Build:
        with self._lock:
            b = self._builds.get(mode)
            if b is None:
                b = self._builds[mode] = _compiler.build(self.code, self.options, self.names, mode)
            return b

    def params(self, name: str) -> list[_args.Param]:
        b = self.build("normal")
        lib = _load(b.so_path)
        i = b.entries[name]
        sig = getattr(lib, f"cpucuda_signature_{i}")
        sig.restype = ctypes.c_char_p
        tname = getattr(lib, f"cpucuda_param_type_{i}")
        tname.restype = ctypes.c_char_p
        tname.argtypes = [ctypes.c_int]
        codes = sig().decode()
        return [_args.Param(c, _args.parse_type_name(tname(k).decode())) for k, c in enumerate(codes)]


class CpuRawKernel:
    """Run a CUDA C ``__global__`` function on the CPU, called like ``cupy.RawKernel``.

    ``CpuRawKernel(code, name, options=())`` then
    ``kernel(grid, block, args, shared_mem=0)`` with NumPy arrays (passed as
    pointers, written in place) and NumPy scalars (passed by value with their
    exact C type). ``name`` may also be a name expression (``"k<16, float>"``).

    Extras beyond CuPy (keyword-only): ``asan=True`` runs launches under
    AddressSanitizer in a child process; ``thread_order="reverse"`` runs the
    threads of each block (and the blocks) in reverse order. Both can also be
    set as attributes, per call (``thread_order=``), or by environment
    (``SANDBOX_CPUCUDA_ASAN=1``, ``SANDBOX_CPUCUDA_ORDER=reverse``).
    """

    max_threads_per_block = 1024

    def __init__(self, code, name, options=(), backend="nvrtc", translate_cucomplex=False, *,
                 enable_cooperative_groups=False, jitify=False, asan=None, thread_order=None, sanitize=None,
                 _program=None):
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"name must be the kernel's name, got {name!r}")
        self.code = code
        self.name = name
        self.options = tuple(options) if not isinstance(options, str) else (options,)
        self.backend = backend
        self.asan = _resolve_asan(asan, sanitize)
        self.thread_order = thread_order
        self.max_dynamic_shared_size_bytes = 0
        self._program = _program or _Program(code, self.options, [name])
        self._program.add(name)
        self._params = None
        self._launchers = {}  # shared-object path -> ctypes launcher

    def compile(self, log_stream=None) -> None:
        """Compile now instead of at the first launch (as CuPy's RawModule.compile)."""
        self._program.build("normal")

    @property
    def params(self) -> list[_args.Param]:
        """The kernel's parameters as C++ sees them (type code and C type)."""
        if self._params is None:
            self._params = self._program.params(self.name)
        return self._params

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None, thread_order=None):
        grid = _dims(grid, "grid", (2**31 - 1, 65535, 65535))
        block = _dims(block, "block", (1024, 1024, 64))
        if block[0] * block[1] * block[2] > 1024:
            raise ValueError(f"block {block}: at most 1024 threads per block")
        shared_mem = int(shared_mem)
        limit = max(_MAX_DEFAULT_DYNAMIC_SMEM, self.max_dynamic_shared_size_bytes)
        if not 0 <= shared_mem <= min(limit, _MAX_DYNAMIC_SMEM):
            raise ValueError(
                f"shared_mem={shared_mem}: a GPU allows 0..{_MAX_DEFAULT_DYNAMIC_SMEM} bytes of dynamic shared memory "
                f"unless kernel.max_dynamic_shared_size_bytes is raised (up to {_MAX_DYNAMIC_SMEM})"
            )
        order = thread_order or self.thread_order or default_thread_order()
        if order not in _ORDERS:
            raise ValueError(f"thread_order={order!r}: use one of {_ORDERS}")
        asan = default_asan() if self.asan is None else bool(self.asan)
        items = _args.convert(self.name, self.params, args)
        if asan:
            from . import asan as _asan

            build = self._program.build("asan")
            _asan.launch(build, self.name, grid, block, shared_mem, stack_size(True), order == "reverse",
                         self.params, items)
            return
        build = self._program.build("normal")
        lib = _load(build.so_path)
        fn = self._launchers.get(build.so_path)
        if fn is None:
            fn = self._launchers[build.so_path] = _abi.launch_function(lib, build.entries[self.name])
        packed = _args.pack(items)
        cfg = _abi.make_config(grid, block, shared_mem, stack_size(False), order == "reverse")
        err = ctypes.create_string_buffer(_abi.ERROR_BUFFER)
        with _LAUNCH_LOCK:
            if _last_lib[0] is not None and _last_lib[0] is not lib:
                _last_lib[0].cpucuda_release()
            _last_lib[0] = lib
            rc = fn(packed.argv, ctypes.byref(cfg), err, len(err))
        if rc:
            raise_launch_error(self.name, rc, err.value.decode(errors="replace"))


def raise_launch_error(name: str, rc: int, message: str):
    cls = CpuKernelMemoryError if rc == 2 else CpuKernelError
    raise cls(f"kernel {name!r}: {message}")


def _normalize(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


class CpuRawModule:
    """A CUDA C module on the CPU, like ``cupy.RawModule(code=..., options=..., name_expressions=...)``.

    Every plain (non-template, top-level) ``__global__`` function is
    available through ``get_function(name)``; template instantiations through
    the name expressions given at construction. ``asan`` and ``thread_order``
    are passed on to the kernels (see :class:`CpuRawKernel`).
    """

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False, asan=None,
                 thread_order=None, sanitize=None):
        if code is None:
            raise ValueError("CpuRawModule needs code= (CUDA C source); path= (cubin/PTX) cannot run on the CPU")
        if isinstance(name_expressions, str):
            raise TypeError("name_expressions must be a list of strings, not a str")
        self.code = code
        self.options = tuple(options) if not isinstance(options, str) else (options,)
        self.backend = backend
        self.name_expressions = tuple(name_expressions or ())
        self.asan = _resolve_asan(asan, sanitize)
        self.thread_order = thread_order
        self._kernels = find_kernels(code)
        plain = [k.name for k in self._kernels if not k.is_template and not k.in_namespace]
        self._program = _Program(code, self.options, plain + list(self.name_expressions))

    def compile(self, log_stream=None) -> None:
        self._program.build("normal")

    def get_function(self, name: str) -> CpuRawKernel:
        """The kernel ``name``: a plain kernel's name or one of the name expressions."""
        if name not in self._program.names:
            matches = [e for e in self.name_expressions if _normalize(e) == _normalize(name)]
            if matches:
                name = matches[0]
            else:
                tmpl = [k.name for k in self._kernels if k.is_template and name.split("<")[0].strip() == k.name]
                if tmpl:
                    raise ValueError(
                        f"{name!r} is a template kernel: pass the instantiation in name_expressions "
                        f"(given: {list(self.name_expressions)})"
                    )
                # Perhaps a kernel the scanner cannot see (macro-generated, namespaced): let g++ decide.
        return CpuRawKernel(self.code, name, self.options, self.backend, asan=self.asan,
                            thread_order=self.thread_order, _program=self._program)
