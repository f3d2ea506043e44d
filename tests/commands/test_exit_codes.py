"""Exit codes that mean what they say: check's refusals, Ctrl-C, the CPU-executor modes it switches on,
and the pasteable problem it prints for a failure (in-process, with fake variants)."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import kernels.numpy_gather as gather
from sandbox.devices import backends
from sandbox import cli
from sandbox.variant import registry
from sandbox.commands import check as check_cmd  # noqa: F401  (attaches the check command's parts to the kinds)
from sandbox.problem import kinds
from sandbox.variant import Limits

MODE_DEFAULTS = {"SANDBOX_CPUCUDA_ASAN": "0", "SANDBOX_CPUCUDA_ORDER": "forward", "SANDBOX_CPUCUDA_RACECHECK": "0",
                 "SANDBOX_CPUCUDA_POISON": "nan"}

# Each thread takes a ticket: forward order gives thread i ticket i, reverse order gives it 3 - i.
TICKETS = r"""
extern "C" __global__ void tickets(int *counter, int *ticket) {
    ticket[threadIdx.x] = atomicAdd(counter, 1);
}
"""


def _register(monkeypatch, name, prepare, limits=None):
    module = types.ModuleType(f"fake_check_{name.replace('.', '_')}")
    module.LIMITS = limits or Limits(block_sizes=(16,), dtypes=("float32",))
    module.prepare = prepare
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.VARIANTS, name, module.__name__)


@pytest.fixture
def modes_env(monkeypatch):
    """The executor's mode variables at their defaults; whatever check sets is undone afterwards."""
    for variable, value in MODE_DEFAULTS.items():
        monkeypatch.setenv(variable, value)


def _mode_probe(problem, backend):
    """Correct output only when its CUDA C launch really ran on the CPU executor in reverse order under ASan."""
    from sandbox.cpucuda import kernel as cpukernel
    inner = gather.prepare(problem, "cpu")
    counter, ticket = np.zeros(1, np.int32), np.full(4, -1, np.int32)
    backends.raw_module(backend, TICKETS).get_function("tickets")(1, 4, (counter, ticket))
    reversed_order = ticket.tolist() == [3, 2, 1, 0]
    asan = cpukernel.default_asan()

    class Prepared:
        def launch(self):
            inner.launch()

        def result(self):
            out = inner.result()
            return out if (reversed_order and asan and backend == "cpu") else np.zeros_like(out)

    return Prepared()


def test_check_asan_and_reverse_reach_the_executor_and_are_named(monkeypatch, modes_env, capsys):
    _register(monkeypatch, "cupy.modeprobe", _mode_probe)
    assert cli.main(["check", "cupy.modeprobe", "--random", "0", "--asan", "--reverse"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("modes: AddressSanitizer (--asan); threads in reverse order (--reverse)")
    assert "PASS  cupy.modeprobe" in out and "[asan, reverse]" in out
    for variable in MODE_DEFAULTS:  # back to the defaults: the probe fails without the flags
        monkeypatch.setenv(variable, MODE_DEFAULTS[variable])
    assert cli.main(["check", "cupy.modeprobe", "--random", "0", "--backend", "cpu"]) == 1
    assert "FAIL  cupy.modeprobe" in capsys.readouterr().out


def test_check_racecheck_and_finite_poison_set_the_executor_switches(monkeypatch, modes_env, capsys):
    import os
    seen = {}

    def prepare(problem, backend):
        seen.update({k: os.environ.get(k) for k in MODE_DEFAULTS}, backend=backend)
        return gather.prepare(problem, "cpu")

    _register(monkeypatch, "cupy.envprobe", prepare)
    assert cli.main(["check", "cupy.envprobe", "--random", "0", "--racecheck", "--poison", "finite"]) == 0
    out = capsys.readouterr().out
    assert "shared-memory race check (--racecheck)" in out and "finite values (--poison finite)" in out
    assert seen["SANDBOX_CPUCUDA_RACECHECK"] == "1" and seen["SANDBOX_CPUCUDA_POISON"] == "finite"
    assert seen["backend"] == "cpu" and "[racecheck, poison]" in out
    with pytest.raises(SystemExit):
        cli.main(["check", "cupy.envprobe", "--poison", "nan-please"])
    capsys.readouterr()
    monkeypatch.setattr(backends, "gpu_present", lambda: True)
    assert cli.main(["check", "cupy.envprobe", "--asan", "--backend", "gpu"]) == 2
    assert "CPU-executor modes run CUDA C on the CPU; drop --backend gpu" in capsys.readouterr().err


def test_check_prints_the_pasteable_problem_of_a_failure(monkeypatch, capsys):
    def prepare(problem, backend):
        inner = gather.prepare(problem, "cpu")
        return types.SimpleNamespace(launch=inner.launch, result=lambda: inner.result() * 0)

    _register(monkeypatch, "numpy.zeros", prepare, Limits(block_sizes=(16,), dtypes=("float32",), backends=("cpu",)))
    assert cli.main(["check", "numpy.zeros", "--random", "1", "--seed", "3"]) == 1
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "problem=" in l)
    call = line.split("problem=", 1)[1]
    assert call.startswith("DecodeProblem.random(") and "..." not in call
    from sandbox.problem.decode import DecodeProblem  # noqa: F401  (the printed call runs as is)
    rebuilt = eval(call)
    assert repr(rebuilt) == call


def test_check_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(kinds.DECODE.parts, "check", interrupted)  # the check command's part of the decode kind
    assert cli.main(["check", "numpy.gather"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted: python -m sandbox check stopped (Ctrl-C)\n"


def test_check_backend_gpu_without_a_gpu_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(backends, "gpu_present", lambda: False)
    assert cli.main(["check", "--backend", "gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --backend gpu: no NVIDIA GPU was found here") and err.count("\n") == 1


def test_check_refuses_a_negative_random_count(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["check", "numpy.gather", "--random", "-3"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--random: must be an integer in [0, 1e+06], got '-3'" in err and err.count("\n") == 1


RACY = r"""
extern "C" __global__ void racy(int *out) {
    __shared__ int value;
    if (threadIdx.x == 0) value = 7;
    out[threadIdx.x] = value;   // no __syncthreads: thread 1 reads while thread 0 may write
}
"""


def test_check_racecheck_reports_a_race_the_plain_run_misses(monkeypatch, modes_env, capsys):
    def prepare(problem, backend):
        out = np.zeros(2, np.int32)
        backends.raw_module(backend, RACY).get_function("racy")(1, 2, (out,))
        return gather.prepare(problem, "cpu")

    _register(monkeypatch, "cupy.racy", prepare)
    assert cli.main(["check", "cupy.racy", "--random", "0", "--backend", "cpu"]) == 0
    capsys.readouterr()
    assert cli.main(["check", "cupy.racy", "--random", "0", "--racecheck"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  cupy.racy" in out and "[racecheck]" in out and "CpuKernelRaceError" in out
