"""CpuRawKernel and CpuRawModule: cupy.RawKernel / cupy.RawModule on the CPU."""
from __future__ import annotations

import ctypes
import importlib
import os
import re
import threading

import numpy as np

from . import _abi
from . import args as _args
from . import compiler as _compiler
from . import poison as _poison
from . import racecheck as _racecheck
from . import traffic as _traffic
from .errors import CpuCompileError, CpuKernelError, CpuKernelMemoryError
from .modes import (ORDERS, build_mode, default_asan, default_poison, default_racecheck, default_thread_order,
                    default_traffic, resolve_poison, resolve_racecheck)
from .source import find_kernels, translate_cucomplex as _translate_cucomplex
from .substitute import substituted

# One launch at a time per process: the runtime in each shared object keeps
# its scheduler state in globals (ctypes releases the GIL during the call).
_LAUNCH_LOCK = threading.Lock()
_LIBS: dict[str, ctypes.CDLL] = {}
_last_lib: list = [None]  # the library whose fiber stacks are mapped (see cpucuda_release)
_ORDERS = ORDERS
_MAX_DEFAULT_DYNAMIC_SMEM = 48 * 1024  # above this CUDA wants the kernel attribute raised
_MAX_DYNAMIC_SMEM = 227 * 1024  # sm_90's opt-in limit per block


_INITIAL_CONSTANTS: dict[str, dict[str, bytes]] = {}  # library path -> __constant__ name -> initial bytes


def _load(path) -> ctypes.CDLL:
    key = str(path)
    lib = _LIBS.get(key)
    if lib is None:
        lib = ctypes.CDLL(key, mode=os.RTLD_LOCAL)
        lib.cpucuda_constant.restype = ctypes.c_void_p
        lib.cpucuda_constant.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.cpucuda_constant_name.restype = ctypes.c_char_p
        lib.cpucuda_constant_name.argtypes = [ctypes.c_uint]
        lib.cpucuda_set_buffers.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        # Modules compiled from the same text share one loaded library: keep the initial values, so a
        # module that never set a constant does not see another module's values (each launch rewrites all).
        initial = {}
        i = 0
        while (name := lib.cpucuda_constant_name(i)) is not None:
            size = ctypes.c_size_t()
            addr = lib.cpucuda_constant(name, ctypes.byref(size))
            initial[name.decode()] = ctypes.string_at(addr, size.value)
            i += 1
        _INITIAL_CONSTANTS[key] = initial
        _LIBS[key] = lib
    return lib


def _resolve_asan(asan, sanitize):
    """``sanitize="address"`` is an alias of ``asan=True``."""
    if sanitize in (None, "", "none"):
        return asan
    if sanitize != "address":
        raise ValueError(f"sanitize={sanitize!r}: only 'address' (AddressSanitizer) is supported")
    return True


def stack_size(mode: str) -> int:
    """Bytes per fiber stack: ``SANDBOX_CPUCUDA_STACK_KB`` (default 256) times the mode's factor (ASan 4)."""
    kib = int(os.environ.get("SANDBOX_CPUCUDA_STACK_KB", "256"))
    return kib * 1024 * build_mode(mode).stack_factor


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
    """Source and options, compiled on demand for a growing set of kernel names.

    Normal builds hold every name (one g++ run per batch); sanitizer builds
    (asan, race, traffic: ``BuildMode.whole_module`` False) hold only the kernel launched,
    since they compile several times slower and a check usually launches one
    configuration of a batch.
    """

    def __init__(self, code: str, options, names):
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of CUDA C source, got {type(code).__name__}")
        self.code = code
        self.options = tuple(options) if not isinstance(options, str) else (options,)
        self.names = list(dict.fromkeys(names))
        self._builds: dict[tuple, _compiler.Build] = {}
        self._lock = threading.Lock()
        self.constants: dict[str, np.ndarray] = {}  # __constant__ values set from Python (get_global)

    def add(self, name: str) -> None:
        with self._lock:
            if name not in self.names:
                self.names.append(name)
                self._builds = {k: b for k, b in self._builds.items() if k[0] != "normal"}

    def build(self, mode: str, name: str | None = None) -> _compiler.Build:
        names = tuple(self.names) if build_mode(mode).whole_module or name is None else (name,)
        code = substituted(self.code)  # the mutation test's hook: see substitute.py
        key = (mode, names, code)
        with self._lock:
            b = self._builds.get(key)
            if b is None:
                b = self._builds[key] = _compiler.build(self.code, self.options, list(names), mode)
            return b

    def constant(self, name: str) -> np.ndarray:
        """The host copy of __constant__ ``name``, filled from the compiled object's initial bytes."""
        with self._lock:
            if name in self.constants:
                return self.constants[name]
        b = self.build("normal")
        decl = next((c for c in b.constants if c.name == name), None)
        if decl is not None and decl.is_const:
            raise ValueError(f"__constant__ {name} is declared const: g++ may keep it in read-only memory, so it "
                             "cannot be set from Python; drop the const to fill it with get_global")
        _load(b.so_path)
        initial = _INITIAL_CONSTANTS[str(b.so_path)]
        if name not in initial:
            known = ", ".join(initial) or "none"
            raise KeyError(f"no __constant__ variable {name!r} in this module (found: {known})")
        host = np.frombuffer(initial[name], dtype=np.uint8).copy()
        with self._lock:
            return self.constants.setdefault(name, host)

    def constant_bytes(self) -> dict[str, bytes]:
        with self._lock:
            return {n: a.tobytes() for n, a in self.constants.items()}

    def load_constants(self, lib, so_path) -> None:
        """Copy this module's __constant__ values (set ones, else the initial ones) into ``lib``."""
        initial = _INITIAL_CONSTANTS.get(str(so_path))
        if not initial:
            return
        values = {**initial, **self.constant_bytes()}
        for name, data in values.items():
            size = ctypes.c_size_t()
            addr = lib.cpucuda_constant(name.encode(), ctypes.byref(size))
            if addr:
                ctypes.memmove(addr, data, min(len(data), size.value))

    def params(self, name: str, mode: str = "normal") -> list[_args.Param]:
        b = self.build(mode, name if mode == "traffic" else None)  # a traffic-only process builds no batch
        lib = _load(b.so_path)
        i = b.entries[name]
        sig = getattr(lib, f"cpucuda_signature_{i}")
        sig.restype = ctypes.c_char_p
        tname = getattr(lib, f"cpucuda_param_type_{i}")
        tname.restype = ctypes.c_char_p
        tname.argtypes = [ctypes.c_int]
        size = getattr(lib, f"cpucuda_param_size_{i}")
        size.restype = ctypes.c_size_t
        size.argtypes = [ctypes.c_int]
        codes = sig().decode()
        return [_args.Param(c, _args.parse_type_name(tname(k).decode()), size(k)) for k, c in enumerate(codes)]


class CpuRawKernel:
    """Run a CUDA C ``__global__`` function on the CPU, called like ``cupy.RawKernel``.

    ``CpuRawKernel(code, name, options=())`` then
    ``kernel(grid, block, args, shared_mem=0)`` with NumPy arrays (passed as
    pointers, written in place) and NumPy scalars (passed by value with their
    exact C type). ``name`` may also be a name expression (``"k<16, float>"``).
    ``translate_cucomplex=True`` does what CuPy does: ``#include <cuComplex.h>``
    becomes CuPy's bridge to ``complex<float>`` / ``complex<double>``
    (``<cupy/complex.cuh>``, included first).

    Extras beyond CuPy (keyword-only): ``asan=True`` runs launches under
    AddressSanitizer in a child process; ``racecheck=True`` (or ``"strict"``)
    checks for data races (racecheck.py), raising :class:`CpuKernelRaceError`;
    ``thread_order="reverse"`` runs the threads of each block (and the
    blocks) in reverse order; ``poison="finite"`` fills shared memory with
    large finite values instead of NaN; ``traffic=True`` counts every memory
    access into Nsight Compute's metrics (sandbox.cpucuda.last_traffic(), see
    traffic.py). Each can also be set as an attribute,
    per call (``thread_order=``, ``poison=``, ``poison_seed=``), or by
    environment (see sandbox/cpucuda/modes.py).
    """

    max_threads_per_block = 1024

    def __init__(self, code, name, options=(), backend="nvrtc", translate_cucomplex=False, *,
                 enable_cooperative_groups=False, jitify=False, asan=None, thread_order=None, sanitize=None,
                 racecheck=None, poison=None, traffic=None, _program=None):
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"name must be the kernel's name, got {name!r}")
        options = tuple(options) if not isinstance(options, str) else (options,)
        if translate_cucomplex and _program is None and isinstance(code, str):
            code, options = _translate_cucomplex(code, options)
        self.code = code
        self.name = name
        self.options = options
        self.backend = backend
        self.asan = _resolve_asan(asan, sanitize)
        self.thread_order = thread_order
        self.racecheck = racecheck
        self.poison = poison
        self.traffic = traffic
        self.max_dynamic_shared_size_bytes = 0
        self._program = _program or _Program(code, self.options, [name])
        self._program.add(name)
        self._params = None
        self._traffic_params = None  # read from the traffic build (a traffic-only process builds no batch)
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

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None, thread_order=None, poison=None,
                 poison_seed=None):
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
        race = default_racecheck() if self.racecheck is None else resolve_racecheck(self.racecheck)
        if asan and race != "off":
            raise ValueError(f"kernel {self.name!r}: asan and racecheck cannot run in one launch (each needs its own "
                             "sanitizer runtime); run the kernel once in each mode")
        traffic = default_traffic() if self.traffic is None else bool(self.traffic)
        if traffic and (asan or race != "off"):
            raise ValueError(f"kernel {self.name!r}: traffic mode cannot share a launch with "
                             f"{'asan' if asan else 'racecheck'} (both need the compiler's instrumentation); "
                             "run the kernel once in each mode")
        kind = resolve_poison(poison or self.poison or default_poison())
        seed = _poison.seed_for_launch(kind, poison_seed)
        _poison.record(kind, seed)
        flags = _abi.FLAG_STRICT if race == "strict" else 0
        mode = "asan" if asan else "race" if race != "off" else "traffic" if traffic else "normal"
        if mode == "traffic" and self._traffic_params is None:
            self._traffic_params = self._program.params(self.name, "traffic")
        params = self._traffic_params if mode == "traffic" else self.params
        items = _args.convert(self.name, params, args)
        reverse = order == "reverse" and mode != "traffic"  # traffic counts blocks in launch order
        config = (grid, block, shared_mem, stack_size(mode), reverse, flags, _poison.KINDS[kind], seed)
        try:
            self._launch(mode, config, items)
        except CpuCompileError:
            raise
        except CpuKernelError as exc:  # every launch error says how shared memory was poisoned
            exc.args = (f"{exc.args[0]}\n({_poison.describe(kind, seed)})",) + exc.args[1:]
            raise

    def _launch(self, mode: str, config: tuple, items) -> None:
        runner = build_mode(mode).runner
        if runner is not None:  # a sanitizer child process (asan.py)
            build = self._program.build(mode, self.name)
            module = importlib.import_module(f".{runner}", __package__)
            module.launch(build, self.name, config, self.params, items, self._program.constant_bytes())
            return
        build = self._program.build(mode, self.name)
        lib = _load(build.so_path)
        fn = self._launchers.get(build.so_path)
        if fn is None:
            fn = self._launchers[build.so_path] = _abi.launch_function(lib, build.entries[self.name])
        packed = _args.pack(items)
        cfg = _abi.make_config(*config)
        err = ctypes.create_string_buffer(_abi.ERROR_BUFFER)
        with _LAUNCH_LOCK:
            if _last_lib[0] is not None and _last_lib[0] is not lib:
                _last_lib[0].cpucuda_release()
            _last_lib[0] = lib
            self._program.load_constants(lib, build.so_path)
            params, arrays = _args.expand(self.params, items)  # a struct's pointer fields: arguments of their own
            lib.cpucuda_set_buffers(*_args.buffer_ranges(arrays))
            traffic = (_traffic.Session(lib, build, self.name, arrays, config[0], config[1], params)
                       if mode == "traffic" else None)
            race = (_racecheck.Session(lib, build, self.name, params, arrays, config[0], config[1])
                    if mode == "race" else None)
            try:
                rc = fn(packed.argv, ctypes.byref(cfg), err, len(err))
            finally:
                if traffic:
                    traffic.end()
                found = race.end() if race else None
            if traffic and not rc:
                traffic.collect()
        if rc:
            raise_launch_error(self.name, rc, err.value.decode(errors="replace"))
        if found:
            raise found


def raise_launch_error(name: str, rc: int, message: str):
    cls = CpuKernelMemoryError if rc == 2 else CpuKernelError
    raise cls(f"kernel {name!r}: {message}")


def _normalize(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


class CpuRawModule:
    """A CUDA C module on the CPU, like ``cupy.RawModule(code=..., options=..., name_expressions=...)``.

    Every plain (non-template, top-level) ``__global__`` function is
    available through ``get_function(name)``; template instantiations through
    the name expressions given at construction. ``asan``, ``racecheck``,
    ``thread_order`` and ``poison`` are passed on to the kernels (see
    :class:`CpuRawKernel`). ``get_global(name)`` gives a ``__constant__``
    variable's bytes as a writable NumPy array.
    """

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False, asan=None,
                 thread_order=None, sanitize=None, racecheck=None, poison=None, traffic=None):
        if code is None:
            raise ValueError("CpuRawModule needs code= (CUDA C source); path= (cubin/PTX) cannot run on the CPU")
        if isinstance(name_expressions, str):
            raise TypeError("name_expressions must be a list of strings, not a str")
        options = tuple(options) if not isinstance(options, str) else (options,)
        if translate_cucomplex and isinstance(code, str):
            code, options = _translate_cucomplex(code, options)
        self.code = code
        self.options = options
        self.backend = backend
        self.name_expressions = tuple(name_expressions or ())
        self.asan = _resolve_asan(asan, sanitize)
        self.thread_order = thread_order
        self.racecheck = racecheck
        self.poison = poison
        self.traffic = traffic
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
                            thread_order=self.thread_order, racecheck=self.racecheck, poison=self.poison,
                            traffic=self.traffic, _program=self._program)

    def get_global(self, name: str) -> np.ndarray:
        """The bytes of ``__constant__`` variable ``name`` as a writable NumPy uint8 array.

        CuPy returns a device MemoryPointer to copy into; here the array is a
        host copy that every launch of this module's kernels copies into the
        variable first (in every mode), so write it before launching:
        ``mod.get_global("coeffs").view(np.float32)[:] = values``. It starts
        with the variable's initial value.
        """
        return self._program.constant(name)
