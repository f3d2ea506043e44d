"""Caches that heal and run nothing foreign (sandbox/cpucuda/cache_entry.py): every entry of the executor's
shared objects, precompiled headers, compiled helpers and the GPU compile cache is written atomically with its
digest beside it; a truncated, empty or garbage entry is rebuilt with a one-line warning, never loaded; a
folder others can write is refused; the GPU compile cache holds JSON, never a pickle."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.analysis import compile_cache
from sandbox.cpucuda import cache_entry
from sandbox.errors import RefusedRequest

ROOT = Path(__file__).resolve().parents[2]
# The next run, in a fresh process (a damaged shared object must never reach dlopen: SIGBUS kills the process).
RUN_KERNEL = """
import numpy as np
from sandbox.cpucuda import CpuRawKernel
out = np.zeros(32, np.float32)
CpuRawKernel('extern "C" __global__ void twice(float* x) { x[threadIdx.x] = 2.0f * threadIdx.x; }', "twice")(1, 32, (out,))
assert (out == 2 * np.arange(32)).all(), out
print("ok")
"""


def run_kernel(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, SANDBOX_CPUCUDA_CACHE=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", RUN_KERNEL], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "garbage": lambda data: os.urandom(4096),
}


def test_a_damaged_shared_object_or_header_is_rebuilt_with_one_warning(tmp_path):
    cache = tmp_path / "cpucuda"
    first = run_kernel(cache)
    assert first.returncode == 0 and first.stdout.strip() == "ok", first.stderr
    (so,) = cache.glob("*.so")
    (gch,) = cache.glob("pch/*/*.gch")
    assert cache_entry.digest_path(so).exists() and cache_entry.digest_path(gch).exists()
    for so_damage, gch_damage in (("truncated", "garbage"), ("empty", "truncated")):  # garbage .so: the unit test
        how = f"{so_damage} .so, {gch_damage} .gch"
        so.write_bytes(DAMAGE[so_damage](so.read_bytes()))
        gch.write_bytes(DAMAGE[gch_damage](gch.read_bytes()))
        again = run_kernel(cache)
        assert again.returncode == 0 and again.stdout.strip() == "ok", f"{how}: {again.returncode} {again.stderr}"
        warnings = [line for line in again.stderr.splitlines() if "is damaged" in line]
        assert len(warnings) == 2 and any(str(so) in w for w in warnings), again.stderr
        assert cache_entry.verified(so) and cache_entry.verified(gch)


def test_an_entry_without_its_digest_is_not_trusted(tmp_path, capsys):
    entry = tmp_path / "x.so"
    cache_entry.write_atomic(entry, b"content")
    assert cache_entry.verified(entry)
    entry.write_bytes(os.urandom(7))
    assert not cache_entry.verified(entry)
    assert "does not match its digest" in capsys.readouterr().err
    cache_entry.write_atomic(entry, b"content")
    cache_entry.digest_path(entry).unlink()
    assert not cache_entry.verified(entry)
    assert "no digest beside it" in capsys.readouterr().err
    assert not cache_entry.verified(tmp_path / "absent.so")
    assert capsys.readouterr().err == ""  # absent: built, silently


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RefusedRequest, match=rf"cache folder {shared} is writable by others \(mode 777\)"):
        cache_entry.checked_folder(shared)
    monkeypatch.setenv("SANDBOX_GPU_COMPILE_CACHE", str(tmp_path))
    (tmp_path / "nvrtc").mkdir(mode=0o775)
    (tmp_path / "nvrtc").chmod(0o775)
    with pytest.raises(RefusedRequest, match="writable by others"):
        compile_cache.cached("nvrtc", ["k"], lambda: 1)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(RefusedRequest, match="belongs to uid"):
        cache_entry.checked_folder(tmp_path / "mine")
    monkeypatch.undo()
    assert cache_entry.checked_folder(tmp_path / "new").stat().st_mode & 0o022 == 0


def test_the_gpu_compile_cache_stores_plain_data_and_constructs_only_named_classes(tmp_path, monkeypatch, capsys):
    from sandbox.analysis.nvrtc import Compiled, Resources

    monkeypatch.setenv("SANDBOX_GPU_COMPILE_CACHE", str(tmp_path))
    value = Compiled("sm_90", b"\x7fELF\x00cubin", "log", {"k": "_Z1kv"}, {"k": Resources(32, 0, 0, 0, 0)}, ("-O3",))
    built = []
    got = compile_cache.cached("nvrtc", ["k"], lambda: built.append(1) or value, types=(Compiled, Resources))
    again = compile_cache.cached("nvrtc", ["k"], lambda: built.append(1) or value, types=(Compiled, Resources))
    assert got == again == value and built == [1]
    (entry,) = (tmp_path / "nvrtc").glob("*.json")
    assert json.loads(entry.read_text())["value"]["__dataclass__"] == "Compiled"
    # a planted entry naming another class (with a matching digest) is refused, not constructed
    planted = {"version": compile_cache.VERSION, "value": {"__dataclass__": "Popen", "fields": {"args": "true"}}}
    cache_entry.write_atomic(entry, json.dumps(planted).encode())
    again = compile_cache.cached("nvrtc", ["k"], lambda: built.append(1) or value, types=(Compiled, Resources))
    assert again == value and built == [1, 1]
    assert "cannot be read (ValueError)" in capsys.readouterr().err
    # a value that is not plain data is returned, uncached, with one warning
    assert compile_cache.cached("other", ["k"], lambda: {1, 2}) == {1, 2}
    assert "not plain data" in capsys.readouterr().err and not list((tmp_path / "other").glob("*.json"))
