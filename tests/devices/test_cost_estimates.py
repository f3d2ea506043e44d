"""Cost estimates before a long CPU run (sandbox/devices/cost.py): a warning past one bound, a refusal past the
hard one unless --force, in check, the sweep and traffic (tiny bounds through the environment)."""
from __future__ import annotations

import pytest

from sandbox import cli
from sandbox.devices import cost
from sandbox.sweep import shapes as shapes_mod
def test_guard_warns_refuses_and_forces(monkeypatch):
    monkeypatch.setenv("SANDBOX_WARN_SECONDS", "1")
    monkeypatch.setenv("SANDBOX_REFUSE_SECONDS", "100")
    lines = []
    rate = cost.RATES["cupy"]
    assert cost.guard("small", int(0.5 * rate), "cupy", "cpu", warn=lines.append).seconds == pytest.approx(0.5)
    assert lines == []
    cost.guard("middle", int(10 * rate), "cupy", "cpu", warn=lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: middle: estimated 10 s on the CUDA C executor")
    with pytest.raises(cost.TooLong, match=r"big: estimated 16.7 min on the CUDA C executor .* over the 100 s bound "
                                           r"\(SANDBOX_REFUSE_SECONDS\); .* --force"):
        cost.guard("big", int(1000 * rate), "cupy", "cpu", warn=lines.append)
    assert cost.guard("big", int(1000 * rate), "cupy", "cpu", force=True, warn=lines.append).seconds > 100
    assert cost.guard("on a GPU", 10**15, "cupy", "gpu") is None  # no bound on a GPU
    traffic = cost.estimate(int(rate), "cupy", "cpu", traffic=True)
    assert traffic.seconds == pytest.approx(cost.TRAFFIC_FACTOR["cupy"]) and "counting traffic" in traffic.where


def test_bounds_from_the_environment_are_checked(monkeypatch):
    assert cost.bounds() == (cost.WARN_SECONDS, cost.REFUSE_SECONDS)
    monkeypatch.setenv("SANDBOX_REFUSE_SECONDS", "soon")
    with pytest.raises(ValueError, match=r"SANDBOX_REFUSE_SECONDS='soon': expected seconds"):
        cost.bounds()


def test_shape_multiply_adds_bound_the_problem():
    shape = shapes_mod.parse_shape("2x40x4/2x32xfp32")
    problem = shapes_mod.paged_problem(shapes_mod.make_tokens(shape, 0), 16)
    assert cost.shape_multiply_adds(shape) == problem.multiply_adds() == 2 * 2 * 4 * 32 * 40


@pytest.mark.parametrize("command", [
    ["check", "numpy.gather", "--random", "0"],
    ["sweep", "--variants", "numpy.gather", "--shapes", "2x40x4/2x32xfp32", "--block-sizes", "16"],
    ["traffic", "cupy.v1", "--shape", "2x40x4/2x32xfp32"],
])
def test_commands_refuse_past_the_hard_bound_before_they_start(command, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SANDBOX_REFUSE_SECONDS", "0.0000001")
    extra = {"sweep": ["--results-dir", str(tmp_path / "runs")], "traffic": ["--json", str(tmp_path / "t.json")]}
    assert cli.main(command + extra.get(command[0], [])) == 2
    err = capsys.readouterr().err
    assert "over the 1e-07 s bound (SANDBOX_REFUSE_SECONDS)" in err and "--force" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "t.json").exists()


def test_check_warns_with_the_estimate_and_force_runs_past_the_bound(monkeypatch, capsys):
    monkeypatch.setenv("SANDBOX_WARN_SECONDS", "0")
    monkeypatch.setenv("SANDBOX_REFUSE_SECONDS", "0.0000001")
    assert cli.main(["check", "numpy.gather", "--random", "0", "--force", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "note: numpy.gather context_len_1/bs1/float32: estimated" in captured.err
    assert captured.out.startswith("PASS  numpy.gather")
