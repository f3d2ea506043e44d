"""The on-disk cache of objects compiled for real GPUs (sandbox/analysis/compile_cache.py): NVRTC cubins and
Numba kernels' compile results are built once per content, rebuilt when anything that decides them changes."""

import pytest

from kernels.numba_cuda.fingerprint import fingerprint
from sandbox.analysis import compile_cache, nvrtc

CODE = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_GPU_COMPILE_CACHE", str(tmp_path))
    return tmp_path


def count_builds(monkeypatch):
    calls = []
    real = nvrtc._compile_cubin

    def counted(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(nvrtc, "_compile_cubin", counted)
    return calls


def test_an_nvrtc_compile_is_built_once_per_content(cache, monkeypatch):
    calls = count_builds(monkeypatch)
    first = nvrtc.compile_cubin(CODE, (), "sm_90")
    again = nvrtc.compile_cubin(CODE, (), "sm_90")
    assert len(calls) == 1 and again == first and again.resources["twice"].registers > 0
    nvrtc.compile_cubin(CODE, (), "sm_80")                       # another target
    nvrtc.compile_cubin(CODE.replace("2.0f", "3.0f"), (), "sm_90")  # an edited kernel
    nvrtc.compile_cubin(CODE, (), "sm_90", options=("-DNDEBUG",))  # another option list
    assert len(calls) == 4
    assert len(list((cache / "nvrtc").glob("*.json"))) == 4


def test_a_damaged_entry_is_rebuilt_and_off_compiles_every_time(cache, monkeypatch):
    calls = count_builds(monkeypatch)
    nvrtc.compile_cubin(CODE, (), "sm_90")
    (entry,) = (cache / "nvrtc").glob("*.json")
    entry.write_bytes(b"half a file")
    assert nvrtc.compile_cubin(CODE, (), "sm_90").resources["twice"].registers > 0
    assert len(calls) == 2
    monkeypatch.setenv("SANDBOX_GPU_COMPILE_CACHE", "off")
    nvrtc.compile_cubin(CODE, (), "sm_90")
    nvrtc.compile_cubin(CODE, (), "sm_90")
    assert len(calls) == 4


def test_failures_are_not_cached(cache):
    for _ in range(2):
        with pytest.raises(nvrtc.NvrtcError, match="failed"):
            nvrtc.compile_cubin("this is not CUDA", (), "sm_90")
    assert not list(cache.rglob("*.json"))


def test_the_default_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("SANDBOX_GPU_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.cache_dir("nvrtc") == tmp_path / "paged-attention-sandbox" / "nvrtc"


def _factory(scale, helper):
    def body(x):
        return helper(x) * scale
    return body


def _double(x):
    return 2 * x


def _triple(x):
    return 3 * x


def test_a_kernel_fingerprint_follows_its_code_closure_and_helpers():
    base = fingerprint(_factory(2.0, _double))
    assert base is not None and base == fingerprint(_factory(2.0, _double))  # the same instantiation
    assert fingerprint(_factory(3.0, _double)) != base                        # a closure value
    assert fingerprint(_factory(2.0, _triple)) != base                        # a helper it calls

    class Opaque:
        pass

    assert fingerprint(_factory(Opaque(), _double)) is None  # no stable content: never cached


def test_numba_kernel_instantiations_have_their_own_fingerprints():
    """A factory-built kernel (the compile reports build one per precision and option set) can be cached, apart."""
    from kernels.numba_cuda import gqa, options

    plain, _ = gqa.kernel_for(4, "float16", "float16", 0)
    capped, _ = gqa.kernel_for(4, "float16", "float16", options.OPT_SOFTCAP)
    assert None not in (fingerprint(plain), fingerprint(capped)) and fingerprint(plain) != fingerprint(capped)
