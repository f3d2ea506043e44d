"""A struct passed by value (a `__grid_constant__` Params holding pointers, as FlashInfer's kernels take) in every
mode of the CPU executor: its pointer fields are arguments, relocated by ASan's child, bounded by racecheck and
named by traffic, so an access through them is checked and attributed as one through a pointer argument."""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.cpucuda import CpuKernelMemoryError, CpuKernelRaceError, CpuRawKernel, Struct, last_traffic

CODE = """
struct Params {
    const float* x;
    float* out;
    int n;
    float scale;
    const int* index;
};

extern "C" __global__ void gather(const __grid_constant__ Params p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.out[i] = p.x[p.index[i]] * p.scale;
}

extern "C" __global__ void collide(const __grid_constant__ Params p) {
    p.out[0] = p.x[threadIdx.x];   // every thread of the block writes one address: a race
}
"""
PARAMS = np.dtype([("x", np.uint64), ("out", np.uint64), ("n", np.int32), ("scale", np.float32),
                   ("index", np.uint64)], align=True)


def _args(n=100, out_of_bounds=False):
    x = np.arange(64, dtype=np.float32)
    index = (np.arange(n, dtype=np.int32) * 7) % 64
    if out_of_bounds:
        index[n - 1] = 64   # one past x's end, read through the struct's pointer
    out = np.zeros(n, np.float32)
    return x, index, out, Struct(PARAMS, x=x, out=out, n=n, scale=np.float32(0.5), index=index)


@pytest.mark.parametrize("mode", [{}, {"asan": True}, {"racecheck": True}, {"traffic": True}])
def test_a_struct_of_pointers_runs_in_every_mode(mode):
    x, index, out, params = _args()
    CpuRawKernel(CODE, "gather", **mode)((4,), (32,), (params,))
    np.testing.assert_array_equal(out, x[index] * np.float32(0.5))


def test_asan_names_the_struct_field_an_access_overruns():
    *_, params = _args(out_of_bounds=True)
    with pytest.raises(CpuKernelMemoryError) as err:
        CpuRawKernel(CODE, "gather", asan=True)((4,), (32,), (params,))
    message = str(err.value).splitlines()[0]
    assert "heap-buffer-overflow" in message and "argument 0 field 'x' (float32, shape (64,)" in message, message


def test_racecheck_names_the_struct_field_raced_on():
    x, _, out, params = _args()
    with pytest.raises(CpuKernelRaceError) as err:
        CpuRawKernel(CODE, "collide", racecheck=True)((1,), (32,), (params,))
    assert "argument 0 field 'out' (float32" in str(err.value) and "element 0" in str(err.value), str(err.value)


def test_traffic_attributes_accesses_through_the_struct_to_its_arrays():
    x, index, out, params = _args(n=128)
    CpuRawKernel(CODE, "gather", traffic=True)((4,), (32,), (params,))
    result = last_traffic()
    targets = {(s["op"], s["target"]) for s in result.sites}
    assert {("load", "p.x"), ("load", "p.index"), ("store", "p.out")} <= targets, targets
    stores = [s for s in result.sites if s["target"] == "p.out"]
    assert sum(s["requests"] for s in stores) == 4   # 128 floats, one 128-byte request per warp
    assert result.metrics["dram__bytes_write.sum"] == out.nbytes


def test_a_struct_is_refused_unless_its_layout_matches():
    x, index, out, _ = _args()
    kernel = CpuRawKernel(CODE, "gather")
    short = np.dtype([("x", np.uint64), ("out", np.uint64)])
    with pytest.raises(TypeError, match=r"argument 0 .*the struct is 32 bytes, the Struct's dtype 16"):
        kernel((1,), (32,), (Struct(short, x=x, out=out),))
    with pytest.raises(TypeError, match=r"a struct passed by value; expects sandbox.cpucuda.Struct"):
        kernel((1,), (32,), (x,))
    with pytest.raises(TypeError, match=r"field 'n' holds a pointer: its dtype must be np.uint64"):
        Struct(PARAMS, n=x)
    with pytest.raises(TypeError, match=r"no field 'y'"):
        Struct(PARAMS, y=x)


def test_device_scalar_is_what_cupy_takes():
    class Device:   # a device array as CuPy's: its address in __cuda_array_interface__
        def __init__(self, address):
            self.__cuda_array_interface__ = {"data": (address, False)}

    scalar = Struct(PARAMS, x=Device(0x7000), out=Device(0x8000), n=5, index=None).device_scalar()
    assert isinstance(scalar, np.void) and scalar.dtype == PARAMS
    assert (int(scalar["x"]), int(scalar["out"]), int(scalar["n"]), int(scalar["index"])) == (0x7000, 0x8000, 5, 0)
