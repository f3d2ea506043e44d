"""Element codecs: the precisions Numba lacks, decoded from and encoded to their bits in device functions.

The simulator has no bfloat16 and Numba has no fp8, so the kernels never see either type: a
bfloat16 array travels as its uint16 bits, an fp8 array as its uint8 codes, and device functions
here turn an element into float32 (DECODE) or a float32 into an output element (ENCODE) with
integer arithmetic on the bits. The same kernel code runs simulated and compiled; the only leaf
that differs is the bit cast (`bits_as_float32` / `float32_as_bits`): an LLVM bitcast intrinsic when
compiled (one `mov.b32`, no local memory), NumPy's `.view` under the simulator (which cannot run
intrinsics; `.view` on a Numba scalar or local array compiles only through an overload that needs a
CUDA driver, so compile_ptx on a GPU-less machine cannot use it).
  bfloat16 -> float32: the bits shifted into the high half (exact).
  e4m3fn / e5m2 -> float32: sign and magnitude bits moved into a float32 whose exponent is short by
      the bias difference, times 2^(127 - bias) (exact, subnormals included: float32 denormals are
      kept, fastmath is off); the NaN codes (and e5m2's inf) are mapped explicitly.
  float32 -> bfloat16: round to nearest even on the bits; NaN -> sign | 0x7FC0 (as ml_dtypes).
  float32 -> fp8 (cache writes): fp8(clip(x / scale, +-max_finite)), round to nearest even with
      subnormals, NaN -> sign | the format's NaN code (make_fp8_encoder).
Float32 and float16 stay native (float16 -> float32 is a hardware convert).
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, types, uint8, uint16, uint32

from sandbox.problem.dtypes import FP8_MAX_FINITE, canonical

from .device import SIMULATED

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

@cuda.jit(device=True, inline="always")
def e2m1_to_float32(code):
    """e2m1 code (the low 4 bits of `code`) -> float32: 0, 0.5, 1, 1.5, 2, 3, 4, 6, negated when bit 3 is
    set (code 8 is -0). Exponent e = bits 1..2, mantissa m = bit 0: m / 2 for e = 0, else (2 + m) 2^e / 4."""
    c = uint32(code) & uint32(0xF)
    e = (c >> uint32(1)) & uint32(3)
    m = c & uint32(1)
    if e == uint32(0):
        magnitude = float32(m) * float32(0.5)
    else:
        magnitude = float32(uint32(2) + m) * float32(uint32(1) << e) * float32(0.25)
    return -magnitude if c & uint32(8) else magnitude


@cuda.jit(device=True, inline="always")
def encode_e2m1(value, negative):
    """float32 `value` -> e2m1 code, round to nearest even, saturating at +-6; `negative` (bool) gives the
    sign (the caller reads it from the input's bits, so -0 and signed NaN follow the reference). The
    midpoints 0.25, 1.25, 2.5, 5 round down to the even code, 0.75, 1.75, 3.5 up."""
    a = abs(value)
    if a <= float32(0.25):
        code = 0
    elif a < float32(0.75):
        code = 1
    elif a <= float32(1.25):
        code = 2
    elif a < float32(1.75):
        code = 3
    elif a <= float32(2.5):
        code = 4
    elif a < float32(3.5):
        code = 5
    elif a <= float32(5.0):
        code = 6
    else:
        code = 7
    return uint8(code | 8) if negative else uint8(code)


# Element -> float32, by the array's sandbox dtype name; float32 -> output element, by the query's.
DECODE = {"float32": native_to_float32, "float16": native_to_float32, "bfloat16": bf16_to_float32,
          "float8_e4m3fn": e4m3_to_float32, "float8_e5m2": e5m2_to_float32}
ENCODE = {"float32": keep_float32, "float16": keep_float32, "bfloat16": float32_to_bf16}
ENCODE_FP8 = {"float8_e4m3fn": encode_e4m3, "float8_e5m2": encode_e5m2}
# What the kernels see in place of the dtypes Numba lacks.
BITS_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


def dtype_name(dtype) -> str:
    """Canonical sandbox dtype name ('bf16', np.float16, ml_dtypes.bfloat16 -> 'bfloat16', ...)."""
    return canonical(dtype)


def device_view(array: np.ndarray) -> np.ndarray:
    """The array as the kernels see it: bfloat16 as uint16 bits, fp8 as uint8 codes, others as is."""
    view = BITS_VIEW.get(array.dtype.name)
    return array if view is None else array.view(view)


def host_view(array: np.ndarray, dtype) -> np.ndarray:
    """A downloaded kernel array back in the sandbox dtype (uint16 bits -> bfloat16, ...)."""
    name = dtype_name(dtype)
    return array.view(np.dtype(name)) if name in BITS_VIEW else array

