"""Shared pieces of the Numba CUDA variants: block reductions, element decoding (bfloat16, fp8),
attention options, launch sizing and checks, uploads, compile reports.

The block reductions are the one place that differs between a GPU and the simulator (which has no
warp shuffles): on a GPU, a warp reduces with `shfl_xor_sync` and warps combine through a small
shared array; under the simulator every thread writes its value to shared memory and reads them
all back. `block_max` / `block_sum` are bound once, at import, from `numba.config.ENABLE_CUDASIM`.
Under the simulator, importing this module also makes its static shared arrays thread-safe (see
serialise_simulated_shared_arrays()).

Precisions. The simulator has no bfloat16 and Numba has no fp8, so the kernels never see either
type: a bfloat16 array travels as its uint16 bits, an fp8 array as its uint8 codes, and device
functions here turn an element into float32 (DECODE) or a float32 into an output element (ENCODE)
with integer arithmetic on the bits. The same kernel code runs simulated and compiled; the only
leaf that differs is the bit cast (`bits_as_float32` / `float32_as_bits`): an LLVM bitcast
intrinsic when compiled (one `mov.b32`, no local memory), NumPy's `.view` under the simulator
(which cannot run intrinsics; `.view` on a Numba scalar or local array compiles only through an
overload that needs a CUDA driver, so compile_ptx on a GPU-less machine cannot use it).
  bfloat16 -> float32: the bits shifted into the high half (exact).
  e4m3fn / e5m2 -> float32: sign and magnitude bits moved into a float32 whose exponent is short by
      the bias difference, times 2^(127 - bias) (exact, subnormals included: float32 denormals are
      kept, fastmath is off); the NaN codes (and e5m2's inf) are mapped explicitly.
  float32 -> bfloat16: round to nearest even on the bits; NaN -> sign | 0x7FC0 (as ml_dtypes).
  float32 -> fp8 (cache writes): fp8(clip(x / scale, +-max_finite)), round to nearest even with
      subnormals, NaN -> sign | the format's NaN code (make_fp8_encoder).
Float32 and float16 stay native (float16 -> float32 is a hardware convert). Every kernel is a
closure specialised at compile time on (query dtype, cache dtype) and on whether soft-cap/ALiBi
are on (below): one jitted kernel per combination, made on first use (kernel factories keep them
in an lru_cache).

Options (AttentionOptions) are runtime arguments, cheap when off: k_scale is folded into the
softmax scale (scale * (q . k * k_scale) = (scale * k_scale) * (q . k)), v_scale multiplies the
output once, a window only moves the first token read (0 without one), and soft-cap and ALiBi are
a uniform branch per logit (apply_options) in a kernel built with them: each kernel also exists
without soft-cap and ALiBi (no_logit_options), so plain problems run the plain code (numba.naive
at sm_90 fp16: 64 registers built without them, 72 with). Kernels are thus specialised on
(query dtype, cache dtype, logit options on/off); `OptionArgs` packs the runtime values.
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
import sys
import threading

import numpy as np
from numba import config, cuda, float32, int32, types, uint8, uint16, uint32

from sandbox.problem.dtypes import FP8_DTYPES, FP8_MAX_FINITE
from sandbox.devices.grid import check_grid
from sandbox.variant import Unsupported

SIMULATED = bool(config.ENABLE_CUDASIM)

WARP = 32
MAX_HEAD_DIM = 256  # per-thread accumulators and the staged query are sized by it
HEAD_DIMS = (32, 64, 80, 96, 112, 120, 128, 192, 256)  # what the variants declare (any <= MAX_HEAD_DIM works)
MAX_THREADS = 128  # per block on a GPU
# The simulator pays per thread and per thread per barrier (one Python thread each): few threads
# there. Every loop in the kernels strides by blockDim, so any count is correct.
SIM_MAX_THREADS = 16
SIM_SWITCH_INTERVAL = 1e-4  # seconds; see simulator_switching()
# Floats of shared scratch a block reduction needs: one per warp on a GPU, one per thread simulated.
REDUCE_SCRATCH = 128 if SIMULATED else WARP
NEG_INF = float32(-math.inf)
ZERO = float32(0.0)

# The configuration compile_report() sizes its dynamic shared memory and threads for: a Llama-3-8B
# like decode step (32 query heads on 8 KV heads, head dim from the caller) at 4096 tokens of context.
REPRESENTATIVE = dict(context_len=4096, num_heads=32, num_kv_heads=8)
COMPILE_PATH = "numba compile_ptx -> nvJitLink"


# ---------------------------------------------------------------------------------------------
# Block-wide reductions: every thread passes its value and gets the block's result back. Every
# thread of the block must call them (they contain barriers); `scratch` is a shared float32 array
# of at least REDUCE_SCRATCH elements, free for reuse once the call returns. Both paths are defined
# everywhere (tests run the shuffle path under the simulator with an emulated shfl_xor_sync);
# block_max / block_sum name the one this process uses.
@cuda.jit(device=True, inline="always")
def warp_max(value):
    offset = WARP // 2
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
        offset //= 2
    return value


@cuda.jit(device=True, inline="always")
def warp_sum(value):
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    return value


# The shuffle path needs blockDim.x to be a multiple of 32 (launch_threads guarantees it on a GPU).
@cuda.jit(device=True, inline="always")
def shuffle_block_max(value, scratch):
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    value = warp_max(value)
    if lane == 0:
        scratch[warp] = value
    cuda.syncthreads()
    value = scratch[lane] if lane < cuda.blockDim.x // WARP else NEG_INF
    value = warp_max(value)
    cuda.syncthreads()
    return value


@cuda.jit(device=True, inline="always")
def shuffle_block_sum(value, scratch):
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    value = warp_sum(value)
    if lane == 0:
        scratch[warp] = value
    cuda.syncthreads()
    value = scratch[lane] if lane < cuda.blockDim.x // WARP else ZERO
    value = warp_sum(value)
    cuda.syncthreads()
    return value


# The simulator path: one scratch slot per thread, every thread reads them all (two barriers).
@cuda.jit(device=True, inline="always")
def shared_block_max(value, scratch):
    scratch[cuda.threadIdx.x] = value
    cuda.syncthreads()
    result = scratch[0]
    for i in range(1, cuda.blockDim.x):
        result = max(result, scratch[i])
    cuda.syncthreads()
    return result


@cuda.jit(device=True, inline="always")
def shared_block_sum(value, scratch):
    scratch[cuda.threadIdx.x] = value
    cuda.syncthreads()
    result = scratch[0]
    for i in range(1, cuda.blockDim.x):
        result += scratch[i]
    cuda.syncthreads()
    return result


block_max = shared_block_max if SIMULATED else shuffle_block_max
block_sum = shared_block_sum if SIMULATED else shuffle_block_sum


# ---------------------------------------------------------------------------------------------
# Bit casts between uint32 and float32: the one leaf that differs between compiled and simulated.
if SIMULATED:
    def bits_as_float32(bits):
        """The float32 whose bits are the low 32 bits of `bits` (a non-negative integer)."""
        return np.uint32(bits).view(np.float32)

    def float32_as_bits(value):
        """The bits of float32 `value` as uint32."""
        return np.float32(value).view(np.uint32)
else:
    from llvmlite import ir as _ir
    from numba.cuda.extending import intrinsic as _intrinsic

    @_intrinsic
    def bits_as_float32(typingctx, bits):
        """The float32 whose bits are `bits` (uint32): an LLVM bitcast, no memory."""
        def codegen(context, builder, signature, args):
            return builder.bitcast(context.cast(builder, args[0], signature.args[0], types.uint32), _ir.FloatType())
        if isinstance(bits, types.Integer):
            return types.float32(bits), codegen
        return None

    @_intrinsic
    def float32_as_bits(typingctx, value):
        """The bits of float32 `value` as uint32: an LLVM bitcast, no memory."""
        def codegen(context, builder, signature, args):
            as_f32 = context.cast(builder, args[0], signature.args[0], types.float32)
            return builder.bitcast(as_f32, _ir.IntType(32))
        if isinstance(value, types.Float):
            return types.uint32(value), codegen
        return None


F32_NAN_BITS = 0x7FC00000  # the quiet NaN ml_dtypes decodes every fp8 NaN code to (with the code's sign)
E4M3_TO_F32 = float32(2.0 ** (127 - 7))   # e4m3fn: bias 7, 3 mantissa bits
E5M2_TO_F32 = float32(2.0 ** (127 - 15))  # e5m2: bias 15, 2 mantissa bits


@cuda.jit(device=True, inline="always")
def native_to_float32(x):
    """float32 / float16 element -> float32 (a hardware convert for float16)."""
    return float32(x)


@cuda.jit(device=True, inline="always")
def bf16_to_float32(bits):
    """bfloat16 bits (uint16) -> float32: they are the float32's high half."""
    return bits_as_float32(uint32(uint32(bits) << uint32(16)))


@cuda.jit(device=True, inline="always")
def e4m3_to_float32(code):
    """float8_e4m3fn code (uint8) -> float32. No infinities; S.1111.111 is NaN."""
    c = uint32(code)
    sign = uint32((c & uint32(0x80)) << uint32(24))
    magnitude = c & uint32(0x7F)
    if magnitude == uint32(0x7F):
        return bits_as_float32(uint32(sign | uint32(F32_NAN_BITS)))
    return bits_as_float32(uint32(sign | (magnitude << uint32(20)))) * E4M3_TO_F32


@cuda.jit(device=True, inline="always")
def e5m2_to_float32(code):
    """float8_e5m2 code (uint8) -> float32. IEEE-like: exponent 11111 is inf (mantissa 0) or NaN."""
    c = uint32(code)
    sign = uint32((c & uint32(0x80)) << uint32(24))
    magnitude = c & uint32(0x7F)
    if magnitude >= uint32(0x7C):
        special = uint32(0x7F800000) if magnitude == uint32(0x7C) else uint32(F32_NAN_BITS)
        return bits_as_float32(uint32(sign | special))
    return bits_as_float32(uint32(sign | (magnitude << uint32(21)))) * E5M2_TO_F32


@cuda.jit(device=True, inline="always")
def keep_float32(value):
    """float32 -> a float32 / float16 output element (the store converts to float16, nearest even)."""
    return value


@cuda.jit(device=True, inline="always")
def float32_to_bf16(value):
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN -> sign | 0x7FC0 (as ml_dtypes)."""
    bits = float32_as_bits(value)
    if (bits & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
        return uint16(((bits >> uint32(16)) & uint32(0x8000)) | uint32(0x7FC0))
    rounded = bits + uint32(0x7FFF) + ((bits >> uint32(16)) & uint32(1))  # < 2^32: NaNs are out
    return uint16(rounded >> uint32(16))


def make_fp8_encoder(name: str):
    """Device function (x: float32, scale: float32) -> uint8 code of fp8(clip(x / scale, +-max_finite)).

    Round to nearest even, subnormals included, saturating (inf too); NaN -> the input's sign |
    the format's NaN code (ml_dtypes': 0x7F for e4m3fn, 0x7E for e5m2). The NaN test reads x
    itself: a GPU's division returns a canonical NaN without the sign.
    """
    mantissa_bits, bias, nan_code = {"float8_e4m3fn": (3, 7, 0x7F), "float8_e5m2": (2, 15, 0x7E)}[name]
    max_finite = FP8_MAX_FINITE[name]
    drop = 23 - mantissa_bits                                   # float32 mantissa bits an fp8 normal drops
    half_minus_one = (1 << (drop - 1)) - 1
    max_bits = int(np.float32(max_finite).view(np.uint32))      # |x| above (or inf) saturates to max
    max_code = int(np.array(max_finite, np.float32).astype(name).view(np.uint8))
    rebias = (127 - bias) << mantissa_bits                      # float32 exponent field -> fp8's
    min_normal_field = 127 + 1 - bias                           # float32 exponent field of fp8's smallest normal
    subnormal_shift = 151 - bias - mantissa_bits                # right shift to units of the smallest subnormal, + field

    @cuda.jit(device=True, inline="always")
    def encode_fp8(x, scale):
        bits = float32_as_bits(x)
        sign = (bits >> uint32(24)) & uint32(0x80)
        if (bits & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
            return uint8(sign | uint32(nan_code))
        a = float32_as_bits(x / scale) & uint32(0x7FFFFFFF)
        if a >= uint32(max_bits):
            return uint8(sign | uint32(max_code))
        field = a >> uint32(23)
        if field >= uint32(min_normal_field):  # normal: RNE on the dropped bits; a carry bumps the exponent
            rounded = (a + uint32(half_minus_one) + ((a >> uint32(drop)) & uint32(1))) >> uint32(drop)
            return uint8(sign | (rounded - uint32(rebias)))
        shift = uint32(subnormal_shift) - field  # >= drop + 1; the result is a subnormal or the smallest normal
        if shift > uint32(24):                   # below half the smallest subnormal (float32 denormals too)
            return uint8(sign)
        significand = (a & uint32(0x7FFFFF)) | uint32(0x800000)
        units = significand >> shift
        rest = significand & ((uint32(1) << shift) - uint32(1))
        half = uint32(1) << (shift - uint32(1))
        if rest > half or (rest == half and (units & uint32(1)) != uint32(0)):
            units += uint32(1)
        return uint8(sign | units)

    return encode_fp8


encode_e4m3 = make_fp8_encoder("float8_e4m3fn")
encode_e5m2 = make_fp8_encoder("float8_e5m2")

# Element -> float32, by the array's sandbox dtype name; float32 -> output element, by the query's.
DECODE = {"float32": native_to_float32, "float16": native_to_float32, "bfloat16": bf16_to_float32,
          "float8_e4m3fn": e4m3_to_float32, "float8_e5m2": e5m2_to_float32}
ENCODE = {"float32": keep_float32, "float16": keep_float32, "bfloat16": float32_to_bf16}
ENCODE_FP8 = {"float8_e4m3fn": encode_e4m3, "float8_e5m2": encode_e5m2}
# What the kernels see in place of the dtypes Numba lacks.
BITS_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


def dtype_name(dtype) -> str:
    """Canonical sandbox dtype name ('bf16', np.float16, ml_dtypes.bfloat16 -> 'bfloat16', ...)."""
    from sandbox.problem.dtypes import canonical
    return canonical(dtype)


def device_view(array: np.ndarray) -> np.ndarray:
    """The array as the kernels see it: bfloat16 as uint16 bits, fp8 as uint8 codes, others as is."""
    view = BITS_VIEW.get(array.dtype.name)
    return array if view is None else array.view(view)


def host_view(array: np.ndarray, dtype) -> np.ndarray:
    """A downloaded kernel array back in the sandbox dtype (uint16 bits -> bfloat16, ...)."""
    name = dtype_name(dtype)
    return array.view(np.dtype(name)) if name in BITS_VIEW else array


# ---------------------------------------------------------------------------------------------
# Attention options on the device. Every attention kernel takes OptionArgs.values(), in this order,
# after (query, key_cache, value_cache, block_tables, context_lens, scale):
#   v_scale float32, window_left int32 (-1: off), softcap float32 (0: off),
#   alibi float32 [num_heads] (a 1-element dummy when off), use_alibi int32 (0/1).
# `scale` itself is the softmax scale times k_scale.
@cuda.jit(device=True, inline="always")
def first_token(context_len, window_left):
    """The first token a decode query at position context_len - 1 reads (the window's start)."""
    if window_left < 0:
        return 0
    return max(0, context_len - 1 - window_left)


@cuda.jit(device=True, inline="always")
def apply_options(logit, softcap, slope, use_alibi, distance):
    """cap * tanh(logit / cap) when softcap > 0, then + slope * distance (t - position) with ALiBi."""
    if softcap > ZERO:
        logit = softcap * math.tanh(logit / softcap)
    if use_alibi:
        logit += slope * float32(distance)
    return logit


@cuda.jit(device=True, inline="always")
def no_logit_options(logit, softcap, slope, use_alibi, distance):
    """apply_options of a kernel built without soft-cap and ALiBi: the logit as it is."""
    return logit


def logit_options(enabled: bool):
    """The logit hook a kernel is built with: apply_options, or (options off) no_logit_options."""
    return apply_options if enabled else no_logit_options


def uses_logit_options(problem) -> bool:
    """Whether the problem needs the kernel built with soft-cap / ALiBi."""
    o = problem.options
    return o.logits_soft_cap > 0 or o.alibi_slopes is not None


def option_types():
    """The Numba types of OptionArgs.values() (for compile_ptx signatures)."""
    return (float32, int32, float32, array(float32, 1), int32)


class OptionArgs:
    """The host side of the options: the scale with k_scale folded in, and the runtime arguments."""

    def __init__(self, problem):
        o = problem.options
        self.scale = np.float32(problem.softmax_scale * o.k_scale)
        self.v_scale = np.float32(o.v_scale)
        self.window_left = np.int32(o.window_left)
        self.softcap = np.float32(o.logits_soft_cap)
        self.use_alibi = np.int32(o.alibi_slopes is not None)
        slopes = o.alibi_slopes if o.alibi_slopes is not None else np.zeros(1, np.float32)
        self.alibi = upload(np.asarray(slopes, dtype=np.float32))

    def values(self) -> tuple:
        return (self.v_scale, self.window_left, self.softcap, self.alibi, self.use_alibi)


def tokens_read(problem) -> np.ndarray:
    """int64 [num_seqs]: tokens each sequence's query reads (context_len, or what the window keeps)."""
    return problem.context_lens.astype(np.int64) - problem.first_read_tokens()


# ---------------------------------------------------------------------------------------------
# The simulator's static shared arrays. numba's FakeCUDAShared.array (0.68) allocates one lazily,
# keyed by the calling source line, with an unlocked get / np.empty / store: every thread of the
# launch's first block runs it at once, and a GIL switch between the get and the store (more likely
# under simulator_switching()'s short interval) hands two threads *different* arrays. One of them
# then writes where no other thread reads and reads np.empty garbage: a wrong or NaN result for
# that block only (4 in 10,000 launches of a 16-thread kernel on a loaded 2-core machine). A GPU
# has no such step. Dynamic shared memory (shape 0) is one buffer made before the threads start.
def serialise_simulated_shared_arrays() -> None:
    """Replace FakeCUDAShared.array with the same allocation (keyed by the caller's file and line),
    made under a lock, so every thread of a launch gets the same array. Idempotent."""
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    fake_shared = kernelapi.FakeCUDAShared
    if getattr(fake_shared.array, "serialised", False):
        return
    dynamic = fake_shared.array
    lock = threading.Lock()

    def array(self, shape, dtype):
        if shape == 0:
            return dynamic(self, shape, dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    array.serialised = True
    fake_shared.array = array


if SIMULATED:
    serialise_simulated_shared_arrays()


# ---------------------------------------------------------------------------------------------
# Launch sizing (host side).
def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch_threads(work: int, simulated: bool | None = None) -> int:
    """Threads per block for `work` parallel items: a power of two, a whole number of warps on a
    GPU (the shuffle reductions need full warps), at most MAX_THREADS (SIM_MAX_THREADS simulated;
    read at each call, so a test may raise it)."""
    if SIMULATED if simulated is None else simulated:
        return min(SIM_MAX_THREADS, next_pow2(work))
    return min(MAX_THREADS, max(WARP, next_pow2(work)))


def check_head_dim(name: str, head_dim: int) -> None:
    if head_dim > MAX_HEAD_DIM:
        raise Unsupported(f"{name} supports head_dim <= {MAX_HEAD_DIM}, got {head_dim}")


def check_launch(kernel_name: str, grid, threads) -> None:
    """sandbox.devices.grid.check_grid, refusing as Unsupported: a problem whose grid no GPU launches."""
    try:
        check_grid(kernel_name, grid, threads)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None


def upload(array):
    """A C-contiguous device copy (the simulator's fake device array under the simulator);
    bfloat16 and fp8 arrays travel as their bits (device_view)."""
    return cuda.to_device(np.ascontiguousarray(device_view(np.asarray(array))))


def output_array(problem):
    """The device output [num_query_tokens, num_heads, head_dim] in the query's device type."""
    return cuda.device_array(problem.query.shape, BITS_VIEW.get(problem.dtype.name, problem.dtype))


def decode_args(problem):
    """Device (query, key_cache, value_cache, block_tables, context_lens), the float32 scale (softmax
    scale x k_scale), then OptionArgs.values(): the first arguments of every attention kernel."""
    p = problem
    options = OptionArgs(p)
    return (upload(p.query), upload(p.key_cache), upload(p.value_cache), upload(p.block_tables),
            upload(p.context_lens), options.scale) + options.values()


def kernel_key(problem) -> tuple[str, str, bool]:
    """(query dtype name, cache dtype name, logit options on): what an attention kernel is specialised on."""
    return problem.dtype.name, problem.kv_dtype.name, uses_logit_options(problem)


class Launch:
    """A configured kernel and its device arguments: launch() only launches, result() downloads.

    The grid and block are checked against CUDA's limits first (Unsupported naming `name`).
    """

    def __init__(self, kernel, grid, threads, shared_bytes, args, outputs, name="numba kernel", out_dtype=None):
        check_launch(name, grid, threads)
        precompile(kernel, args)
        self.configured = kernel[grid, threads, 0, shared_bytes]
        self.grid, self.threads, self.shared_bytes = grid, threads, shared_bytes
        self.args = args
        self.outputs = outputs
        self.out_dtype = out_dtype

    def launch(self) -> None:
        if SIMULATED:
            with simulator_switching():
                self.configured(*self.args)
        else:
            self.configured(*self.args)

    def result(self):
        out = self.outputs.copy_to_host()
        return out if self.out_dtype is None else host_view(out, self.out_dtype)


@contextlib.contextmanager
def simulator_switching():
    """Let the simulator's Python threads take turns faster during a launch.

    The simulator runs one Python thread per CUDA thread while its scheduler polls them in a busy
    loop; with the default 5 ms GIL switch interval, threads wait at every barrier for the poller's
    slice to end. 0.1 ms made our simulated launches 3-10x faster (measured on 2 cores).
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def precompile(kernel, args) -> None:
    """Compile for the exact argument types now (prepare), so the timed launch never compiles."""
    if not SIMULATED:
        from numba import typeof
        kernel.compile(tuple(typeof(a) for a in args))


# ---------------------------------------------------------------------------------------------
# Signatures for compile_ptx: the types numba infers for C-contiguous device arrays.
def element_type(dtype):
    """The Numba type a kernel sees for a sandbox dtype (bfloat16 as uint16 bits, fp8 as uint8 codes)."""
    return {"float32": types.float32, "float16": types.float16, "bfloat16": types.uint16,
            "float8_e4m3fn": types.uint8, "float8_e5m2": types.uint8}[dtype_name(dtype)]


def array(dtype, ndim):
    return types.Array(dtype, ndim, "C")


def report_dtypes(dtype, kv_dtype=None) -> tuple[str, str]:
    """compile_report's precision: dtype "bfloat16" or "float16:float8_e4m3fn" (query:cache), or
    dtype plus kv_dtype; the cache defaults to the query's dtype. Aliases (bf16, e4m3) work."""
    dtype = str(dtype)
    if ":" in dtype:
        if kv_dtype is not None:
            raise ValueError(f"give the cache dtype once: dtype={dtype!r} and kv_dtype={kv_dtype!r}")
        dtype, kv_dtype = dtype.split(":", 1)
    q = dtype_name(dtype)
    kv = q if kv_dtype is None else dtype_name(kv_dtype)
    if kv != q and kv not in FP8_DTYPES:
        raise ValueError(f"the cache must have the query's dtype ({q}) or be fp8 ({', '.join(FP8_DTYPES)}), got {kv}")
    return q, kv


def decode_signature(dtype, kv_dtype, *extra):
    """(query, key_cache, value_cache, block_tables, context_lens, scale, *options, *extra)."""
    q, kv = element_type(dtype), element_type(kv_dtype)
    return ((array(q, 3), array(kv, 4), array(kv, 4), array(int32, 2), array(int32, 1), float32)
            + option_types() + tuple(extra))


def out_array(dtype, ndim=3):
    return array(element_type(dtype), ndim)


@functools.lru_cache(maxsize=None)
def kernel_resources(pyfunc, signature: tuple, arch: str) -> dict:
    """Registers, static shared, local bytes and spills of one kernel, via compile_ptx + nvJitLink.

    Needs numba.cuda in real mode (no GPU needed). The code does not depend on block size or head
    dim (both are runtime values), so one compile per (kernel, signature, arch) serves every row.
    """
    from sandbox.analysis.resources import link_ptx, parse_arch

    if SIMULATED:
        raise RuntimeError("compile_ptx is unavailable under the simulator: call through sandbox.analysis.resources")
    cc = parse_arch(arch)
    ptx, _ = cuda.compile_ptx(pyfunc, signature, cc=cc)
    info = link_ptx(ptx, arch)
    info["fp64_instructions"] = len(re.findall(r"\.f64\b", ptx))  # float64 math would be a typing slip
    info["shuffles"] = ptx.count("shfl.sync")  # > 0 where the GPU reduction path is compiled in
    return info


def report(kernels, threads_per_block: int, dynamic_shared_bytes: int, note: str = "") -> dict:
    """compile_report() dict for the main kernel, with `kernels` listing every kernel of the variant."""
    main = dict(kernels[0])
    out = {
        "registers": main["registers"],
        "static_shared_bytes": main["static_shared_bytes"],
        "dynamic_shared_bytes": int(dynamic_shared_bytes),
        "local_bytes": main["local_bytes"],
        "spill_stores": main["spill_stores"],
        "spill_loads": main["spill_loads"],
        "threads_per_block": int(threads_per_block),
        "path": COMPILE_PATH,
        "kernels": [dict(k) for k in kernels],
    }
    if note:
        out["note"] = note
    return out


def compile_reports(names, block_size: int = 16, head_dim: int = 128, dtype: str = "float16", arch: str = "sm_90",
                    kv_dtype: str | None = None, logit_options: bool = False) -> dict:
    """{name: compile_report(block_size, head_dim, dtype, arch, kv_dtype=..., logit_options=...)} for registered numba
    variants and cache writers, in this process (real mode: call through sandbox.devices.other_mode from a
    simulator process). Any precision the kernels take, e.g. dtype "bfloat16", kv_dtype "float8_e4m3fn"."""
    from sandbox.variant import registry

    if SIMULATED:
        raise RuntimeError("compile_ptx is unavailable under the simulator: use sandbox.devices.other_mode.call_in_numba_mode")
    out = {}
    for name in names:
        entry = registry.get_cache_writer(name) if name in registry.CACHE_WRITERS else registry.get(name)
        kwargs = dict(kv_dtype=kv_dtype)
        if logit_options and name not in registry.CACHE_WRITERS:
            kwargs["logit_options"] = True
        out[name] = entry.module.compile_report(block_size, head_dim, dtype, arch, **kwargs)
    return out
