"""The CLI as a user meets it: list, check (exit codes), unknown names."""
import subprocess
import sys


def sandbox_cli(*args):
    return subprocess.run([sys.executable, "-m", "sandbox", *args], capture_output=True, text=True, timeout=600)


def test_list_shows_registered_variants():
    proc = sandbox_cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "numpy.gather" in proc.stdout


def test_check_passes_numpy_gather():
    proc = sandbox_cli("check", "numpy.gather")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS  numpy.gather")


def test_check_unknown_name_fails_clearly():
    proc = sandbox_cli("check", "numpy.nope")
    assert proc.returncode != 0
    assert "unknown variant 'numpy.nope'; valid names:" in proc.stderr


def test_check_fails_a_negative_control_and_reports_why():
    proc = sandbox_cli("check", "wrong.cupy.ignores_table", "--random", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FAIL  wrong.cupy.ignores_table")
    assert "worst max abs err" in proc.stdout and "elements differ beyond atol=" in proc.stdout
