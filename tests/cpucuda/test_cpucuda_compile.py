"""How the CPU executor compiles (sandbox.cpucuda.compiler, pch): include folders, linker errors, the standard
headers a CUDA translation unit gets for free, and the precompiled runtime header (one per flag set, built once
under a lock by parallel processes, used by every later compile)."""
from __future__ import annotations

import concurrent.futures
import os
import stat
import textwrap

import numpy as np
import pytest

from sandbox.cpucuda import CpuCompileError, CpuRawKernel


def test_headers_in_several_folders_keep_every_include_folder(tmp_path):
    """A header declaring __shared__ sends every user header through the overlay, with one -idirafter per header
    folder; removing repeated option *tokens* left the second folder on the command line as a linker input."""
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "stage.cuh").write_text(
        "#pragma once\n__device__ float stage(float v) {\n    __shared__ float s[32];\n    s[threadIdx.x] = v;\n"
        "    __syncthreads();\n    return s[31 - threadIdx.x];\n}\n")
    (tmp_path / "b" / "scale.cuh").write_text("#pragma once\n__device__ float scale(float v) { return 2 * v; }\n")
    (tmp_path / "c" / "shift.cuh").write_text("#pragma once\n__device__ float shift(float v) { return v + 1; }\n")
    code = ('#include "stage.cuh"\n#include "scale.cuh"\n#include "shift.cuh"\n'
            'extern "C" __global__ void k(float* out) { out[threadIdx.x] = shift(scale(stage((float)threadIdx.x))); }\n')
    out = np.zeros(32, np.float32)
    CpuRawKernel(code, "k", options=tuple(f"-I{tmp_path / n}" for n in "abc"))(1, 32, (out,))
    np.testing.assert_array_equal(out, 2 * (31 - np.arange(32)) + 1)


def test_a_link_error_shows_the_linkers_own_lines():
    code = ('__device__ float helper(float);  // declared, never defined\n'
            'extern "C" __global__ void k(float* out) { out[threadIdx.x] = helper(1.0f); }\n')
    with pytest.raises(CpuCompileError) as info:
        CpuRawKernel(code, "k").compile()
    msg = str(info.value)
    assert msg.startswith("the linker could not link the kernel's shared object:"), msg
    assert "undefined reference to `helper(float)'" in msg, msg


STD_HEADERS = r"""
// No #include: nvcc's host headers bring these in, and so does the executor's runtime.
template <class T> struct traits { static constexpr bool is_float = std::is_same<T, float>::value; };
__device__ std::tuple<int, float> split(float v) { return std::make_tuple(int(v), v - int(v)); }
extern "C" __global__ void std_headers(float* out, std::int64_t* big, std::uint8_t* small) {
    auto [whole, frac] = split(2.75f);
    std::pair<int, int> p = std::make_pair(3, 4);
    std::tuple<int, float> t(whole, frac);
    out[0] = std::get<0>(t) + std::get<1>(t);
    out[1] = std::numeric_limits<float>::max();
    out[2] = traits<float>::is_float && !std::is_same<int, float>::value ? 1.0f : 0.0f;
    out[3] = float(p.first * p.second);
    out[4] = std::is_integral<std::size_t>::value + std::is_floating_point<double>::value;
    int a = 1, b = 2;
    std::swap(a, b);
    out[5] = float(std::move(a) * 10 + std::forward<int>(b));
    out[6] = float(std::tuple_size<decltype(t)>::value + std::numeric_limits<std::int8_t>::digits);
    out[7] = std::fabs(-0.5f) + std::min(1.0f, 2.0f);
    big[0] = std::numeric_limits<std::int64_t>::min();
    small[0] = std::numeric_limits<std::uint8_t>::max();
}
"""


def test_standard_headers_come_without_an_include():
    out, big, small = np.zeros(8, np.float32), np.zeros(1, np.int64), np.zeros(1, np.uint8)
    CpuRawKernel(STD_HEADERS, "std_headers")(1, 1, (out, big, small))
    np.testing.assert_array_equal(out, [2.75, np.finfo(np.float32).max, 1, 12, 2, 21, 9, 1.5])
    assert big[0] == np.iinfo(np.int64).min and small[0] == 255


# ---------------------------------------------------------------- precompiled runtime header

def _logging_compiler(tmp_path):
    """A g++ wrapper that logs every command and what g++ -H says about the precompiled header."""
    log = tmp_path / "gxx.log"
    wrapper = tmp_path / "gxx"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *--version*|*-print-file-name*) exec g++ "$@";; esac
        echo "CMD $*" >> {log}
        g++ -H "$@" 2> {tmp_path}/stderr.$$; rc=$?
        grep -E '^! ' {tmp_path}/stderr.$$ >> {log}
        grep -vE '^\\.+ |^! |^Multiple include guards|^/' {tmp_path}/stderr.$$ >&2
        rm -f {tmp_path}/stderr.$$
        exit $rc
        """))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


KERNEL = 'extern "C" __global__ void k(float* out) { out[threadIdx.x] = KVALUE; }\n'


def _compile(value: str, options=()) -> None:
    CpuRawKernel(KERNEL.replace("KVALUE", value), "k", options=options).compile()


def test_the_precompiled_runtime_header_is_built_once_and_used(tmp_path, monkeypatch):
    wrapper, log = _logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    env = {"SANDBOX_CPUCUDA_CXX": str(wrapper), "SANDBOX_CPUCUDA_CACHE": str(cache), "SANDBOX_CPUCUDA_PCH": "1"}
    for name, value in env.items():  # read at each build
        monkeypatch.setenv(name, value)
    # Two kernels with the same flags compile at once (threads: flock excludes open files, as between the
    # processes of pytest-xdist): one builds the header, the other waits for it.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(_compile, ["1.0f", "2.0f"]))
    _compile("3.0f", options=("-DTILE=16",))          # a macro the runtime never tests: the same header
    _compile("4.0f", options=("-DNDEBUG",))           # assert.h tests NDEBUG: a header of its own
    lines = log.read_text().splitlines()
    builds = [ln for ln in lines if ln.startswith("CMD") and "c++-header" in ln]
    kernels = [ln for ln in lines if ln.startswith("CMD") and "c++-header" not in ln]
    used = [ln for ln in lines if ln.startswith("! ") and ln.endswith("cpucuda_runtime.h.gch")]
    assert len(builds) == 2 and len(kernels) == 4, lines
    assert sum("-DNDEBUG" in b for b in builds) == 1
    assert len(used) == 4, lines  # every kernel compile loaded a valid precompiled header
    assert len(set(used)) == 2 and all(str(cache / "pch") in u for u in used)
    assert not list((cache / "pch").rglob("*.tmp"))


def test_without_the_precompiled_header_nothing_is_built(tmp_path, monkeypatch):
    wrapper, log = _logging_compiler(tmp_path)
    monkeypatch.setenv("SANDBOX_CPUCUDA_CXX", str(wrapper))
    monkeypatch.setenv("SANDBOX_CPUCUDA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SANDBOX_CPUCUDA_PCH", "0")
    _compile("5.0f")
    text = log.read_text()
    assert "c++-header" not in text and "\n! " not in text and not (tmp_path / "cache" / "pch").exists()
    monkeypatch.setenv("SANDBOX_CPUCUDA_PCH", "sometimes")
    with pytest.raises(ValueError, match="SANDBOX_CPUCUDA_PCH='sometimes'"):
        _compile("6.0f")
