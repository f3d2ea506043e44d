"""A new score modifier is one option-table row (with its hook body for each kernel family) and the reference's
line: tests/score_modifier_row.py adds a per-head first-token bias the project does not ship, registered only in a
child process (SANDBOX_EXTRA_OPTION_ROWS), and every variant that accepts it must match the reference there."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parents[1]  # tests/: score_modifier_row.py
SEED = 2901

CHILD = f"""
import json
import reference
import sandbox
from sandbox import DecodeProblem, run_problem
from sandbox.checking.compare import compare
from sandbox.variant import registry
from score_modifier_row import reference_line

problems = [DecodeProblem.random({SEED}, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                 max_context_len=40, dtype="float16", first_token_bias="random"),
            DecodeProblem.random({SEED + 1}, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                 max_context_len=40, dtype="float16", query_lens=3, first_token_bias="random",
                                 alibi_slopes="paper", logits_soft_cap=5.0)]
rows = []
for problem in problems:
    keywords = problem.kwargs()
    bias = keywords.pop("first_token_bias")
    expected = reference.paged_attention(*problem.arrays(), **keywords, score_modifiers=(reference_line(bias),))
    without = reference.paged_attention(*problem.arrays(), **keywords)
    rows.append(dict(name="reference", ok=not compare(without, expected, problem.dtype).ok, text="the bias bites"))
    for name in sandbox.variants(problem="decode"):
        if registry.get(name).limits.supports(problem):
            got = run_problem(name, problem)
            comparison = compare(got, expected, problem.dtype)
            rows.append(dict(name=name, ok=comparison.ok, text=repr(problem) + ": " + str(comparison)))
print("RESULT " + json.dumps(rows))
"""


def test_an_unshipped_score_modifier_reaches_every_kernel_through_one_row():
    root = TESTS.parent
    env = dict(os.environ, SANDBOX_EXTRA_OPTION_ROWS="score_modifier_row:ROWS",
               PYTHONPATH=os.pathsep.join([str(root), str(TESTS)]))
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(done.stdout.split("RESULT ", 1)[1])
    failed = [row for row in rows if not row["ok"]]
    assert not failed, f"seed {SEED}: " + "\n".join(f"{row['name']}: {row['text']}" for row in failed)
    checked = {row["name"] for row in rows}
    # both families and every multi-query kernel took it (not a vacuous pass)
    assert {"cupy.v1", "cupy.rows", "cupy.multi", "cupy.cascade", "cupy.tc", "numba.naive", "numba.multi"} <= checked, checked


def test_the_extra_row_is_absent_from_shipped_runs():
    from sandbox.problem.options import FEATURES
    assert "first_token_bias" not in FEATURES


def test_a_malformed_extra_rows_variable_is_refused_by_name():
    env = dict(os.environ, SANDBOX_EXTRA_OPTION_ROWS="score_modifier_row", PYTHONPATH=str(TESTS.parent))
    done = subprocess.run([sys.executable, "-c", "import sandbox"], cwd=TESTS.parent, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "SANDBOX_EXTRA_OPTION_ROWS must be 'package.module:NAME[,...]', got 'score_modifier_row'" in done.stderr
