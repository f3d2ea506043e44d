"""Bad input, all in one table: every case a refusal with one line naming the argument and the bound, exit 2,
nothing written; output paths that fail, exit as docs/exit-codes.md says; and a seeded fuzz of random argument
strings over every command's parser (sandbox/cli.py's COMMANDS: a new command joins by being registered).

The allocator's bad requests are thrown at every step of tests/paging/test_paging.py's stateful machine; the caches'
damaged entries are in tests/cpucuda/test_cache_entries.py; NaN inputs in the registry-walking property tests.
"""
from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

import sandbox
from sandbox import cli
from sandbox.errors import RefusedRequest
from sandbox.problem import DecodeProblem

FUZZ_SEED = 20261205
FUZZ_CASES_PER_COMMAND = 150


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh current folder with the results root inside it: a refusal must leave it as it was."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SANDBOX_RESULTS", str(tmp_path / "results"))
    return tmp_path


def main_status(argv) -> int:
    """cli.main's exit status, whether returned or raised (argparse's refusals are SystemExit(2))."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def files_under(folder) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def tuned_file(folder, content) -> str:
    path = folder / "tuned" / "tuned.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path.parent)


def sweep_csv(folder, name: str, content: bytes) -> str:
    run = folder / name
    run.mkdir()
    (run / "sweep.csv").write_bytes(content)
    return str(run)


def model_table(folder, content: bytes) -> str:
    path = folder / "table.csv"
    path.write_bytes(content)
    return str(path)


def trace_file(folder, content: bytes) -> str:
    path = folder / "trace.csv"
    path.write_bytes(content)
    return str(path)


MODEL_HEADER = b"source,device,variant,shape,block_size,config,measured_us\n"
GOOD_ROW = (b"variant,shape,block_size,backend,status,time_us,model_time_us\n"
            b"cupy.v1,2x40x4/2x64xfp16,16,cpu,ok,12.5,3.0\n")
# (argv, message fragment); each must exit 2 with that one line and write nothing. A callable argv takes the
# work folder (for files it needs to read).
REFUSED = [
    (["sweep", "--budget-ms", "nan"], "argument --budget-ms: must be a finite number, got 'nan'"),
    (["sweep", "--max-seconds", "nan"], "argument --max-seconds: must be a finite number"),
    (["sweep", "--warmup-ms", "-5"], "argument --warmup-ms: must be a number in [0, 3.6e+06], got '-5'"),
    (["sweep", "--seed", "-1"], "argument --seed: must be an integer in [0, 1e+09], got '-1'"),
    (["sweep", "--max-repeats", "0"], "argument --max-repeats: must be an integer in [1, 1e+06]"),
    (["sweep", "--variants", ""], "--variants '' names no variant"),
    (["sweep", "", "--backend", "cpu"], "--variants '' names no variant"),
    (["sweep", "--backend", "cpu", "--quick", "--query-lens", "99999"],
     "--query-lens 99999: more query tokens than any shape's context (the longest has 40 tokens)"),
    (["sweep", "--dense", "nosuch"], "--dense 'nosuch': not a registered variant"),
    (lambda w: ["sweep", "--backend", "cpu", "--quick", "--tuned", tuned_file(w, {"points": [1]})],
     "tuned.json: points[0] must be an object with variant, shape, block_size and config, got 1"),
    (lambda w: ["sweep", "--backend", "cpu", "--quick", "--tuned",
                tuned_file(w, {"points": [{"variant": "cupy.v1", "block_size": 16}]})],
     "tuned.json: points[0] has no 'shape'"),
    (lambda w: ["sweep", "--backend", "cpu", "--quick", "--tuned",
                tuned_file(w, {"points": [{"variant": "cupy.v1", "shape": "s", "block_size": "abc"}]})],
     "tuned.json: points[0].block_size must be an integer >= 1, got 'abc'"),
    (lambda w: ["sweep", "--backend", "cpu", "--quick", "--tuned", tuned_file(w, "{not json")],
     "no readable tuned.json (JSONDecodeError"),
    (lambda w: ["compare", sweep_csv(w, "a", GOOD_ROW), sweep_csv(w, "b", GOOD_ROW), "--threshold", "nan"],
     "argument --threshold: must be a finite number, got 'nan'"),
    (lambda w: ["compare", sweep_csv(w, "a", GOOD_ROW), sweep_csv(w, "b", b"variant,\xff\xfe\n")],
     "sweep.csv: not UTF-8 text (invalid start byte at byte"),
    (lambda w: ["compare", sweep_csv(w, "a", GOOD_ROW), sweep_csv(w, "b", GOOD_ROW.replace(b"3.0", b"-3.0"))],
     "sweep.csv line 2: model_time_us = -3.0 is not a time"),
    (["traffic", "cupy.v1", "--exact", "--sample-seqs", "2"], "--exact counts every block; --sample-seqs 2 samples"),
    (["traffic", "cupy.v1", "--json", "x.json", "--csv", "x.json"], "--json and --csv name the same file x.json"),
    (["traffic", "cupy.v1", "--json", "."], "--json .: is a folder; name a file"),
    (["traffic", "cupy.v1", "--csv", "no/such/folder/t.csv"], "--csv no/such/folder/t.csv: the folder"),
    (["traffic", "cupy.v1", "--shape", "64x99999999x32/8x128xfp16"],
     "--shape 64x99999999x32/8x128xfp16: counting it would take about"),
    (["traffic", "cupy.v1", "--seed", "-1"], "argument --seed: must be an integer in [0, 1e+09]"),
    (["traffic", "cupy.v1", "--sites", "inf"], "argument --sites: must be an integer"),
    (["traffic", "cupy.v1", "--device", "v100"], "--device v100: device must be one of h200, h100"),
    (["traffic", "cupy.v1", "--plot", "."], "--plot .: is a folder; name a file"),
    (["traffic", "cupy.v1", "--json", "x.png", "--plot", "x.png"], "--json and --plot name the same file x.png"),
    (["model-check", "--json", "."], "--json .: is a folder; name a file"),
    (["model-check", "--json", "no/such/folder/m.json"], "--json no/such/folder/m.json: the folder"),
    (["model-check", "--table", "no/such.csv"], "--table no/such.csv: no such file"),
    (lambda w: ["model-check", "--table", model_table(w, MODEL_HEADER + b"\xff\xfe,h200\n")],
     "table.csv: not UTF-8 text (invalid start byte at byte"),
    (lambda w: ["model-check", "--table", model_table(w, MODEL_HEADER + b"paper,h200,cupy.v1\n")],
     "table.csv line 2: 7 cells expected"),
    (lambda w: ["model-check", "--table", model_table(w, MODEL_HEADER + b"paper,h200,cupy.v1,8x4096,16,,nan\n")],
     "table.csv line 2: measured_us must be a finite number > 0, got 'nan'"),
    (lambda w: ["model-check", "--table", model_table(w, MODEL_HEADER + b"paper,v100,cupy.v1,8x4096,16,,10\n")],
     "table.csv line 2: device must be one of"),
    (["resources", "cupy.v1", "--head-dim", "0"], "argument --head-dim: must be an integer in [1, 1024], got '0'"),
    (["sass", "cupy.v1", "--head-dim", "0"], "argument --head-dim: must be an integer in [1, 1024], got '0'"),
    (["check", "numpy.gather", "--random", "-1"], "argument --random: must be an integer in [0, 1e+06]"),
    (["check", "numpy.gather", "--seed", "1e3"], "argument --seed: must be an integer, got '1e3'"),
    (["memory", "--seed", "-1"], "argument --seed: must be an integer in [0, "),
    (["memory", "--model-gb", "nan"], "argument --model-gb: must be a finite number, got 'nan'"),
    (["memory", "--model", "nosuch"], "argument --model: invalid choice: 'nosuch'"),
    (["memory", "--trace", "no/such.csv"], "trace 'no/such.csv' is not a readable file"),
    (lambda w: ["memory", "--trace", trace_file(w, b"prompt_len,output_len\n1,x\n")],
     "trace.csv' line 2: prompt_len and output_len must be integers"),
    (lambda w: ["memory", "--trace", trace_file(w, b"prompt_len,output_len\n\xff\xfe,1\n")], "is not UTF-8 text"),
    (["memory", "--max-len", "2"], "--max-len must be >= 3 for sharegpt-like lengths"),
    (["memory", "--budget-tokens", "100"], "the KV budget (100 tokens) must hold at least one request"),
    (["memory", "--example", "seed", "--num-requests", "3"],
     "--example seed prints a fixed worked example; it takes no"),
    (["memory", "--calibrate-beam", "--distribution", "uniform"], "--calibrate-beam needs --distribution alpaca"),
    (["serving", "--seeds", "0"], "argument --seeds: must be an integer in [1, 100], got '0'"),
    (["serving", "--warmup", "nan"], "argument --warmup: must be a finite number, got 'nan'"),
    (["serving", "--swap-gbps", "0"], "argument --swap-gbps: must be a number in (0, 10000], got '0'"),
    (["serving", "--rates", "nan"], "argument --rates: must be a finite number, got 'nan'"),
    (["serving", "--model", "nosuch"], "argument --model: invalid choice: 'nosuch'"),
    (["serving", "--kernel", "nosuch"], "--kernel nosuch at block size 16: unknown variant 'nosuch'"),
    (["serving", "--kernel", "cupy.v1", "--step-cost", "model"], "--kernel must be used with --step-cost analytic"),
    (["serving", "--step-cost", "model:numba.gqa"], "numba.gqa is not a CUDA C (cupy.*) variant"),
    (["serving", "--budget-tokens", "100"], "must be a KV budget of at least --max-len (2048) tokens, got 100"),
    (["serving", "--trace", "no/such.csv"], "trace 'no/such.csv' is not a readable file"),
    (lambda w: ["serving", "--trace", trace_file(w, b"prompt_len,output_len,arrival\n1,2,nan\n")],
     "trace.csv' line 2: arrival must be a finite number of seconds >= 0"),
    (["serving", "--json", "."], "--json must be a file in an existing folder, got ."),
    (["check", "triton.naive", "--seed", "1e3"], "argument --seed: must be an integer, got '1e3'"),
    (["traffic", "flashinfer.decode", "--exact", "--sample-seqs", "2"], "--exact counts every block; --sample-seqs 2"),
    (["list", "--nosuch"], "unrecognized arguments: --nosuch"),
    (["nosuch"], "invalid choice: 'nosuch'"),
]


@pytest.mark.parametrize("argv, message", REFUSED, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_refused_with_one_line_exit_2_and_nothing_written(workdir, capsys, argv, message):
    argv = argv(workdir) if callable(argv) else argv
    before = files_under(workdir)
    assert main_status(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert files_under(workdir) == before


def test_a_results_dir_that_is_a_file_is_refused_before_anything_runs(workdir, capsys):
    (workdir / "plain").write_text("")
    assert cli.main(["sweep", "--backend", "cpu", "--quick", "--results-dir", str(workdir / "plain")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--results-dir {workdir / 'plain'}: cannot create a run folder there" in err


def test_an_output_that_fails_while_writing_names_the_path_and_exits_1(workdir, capsys, monkeypatch):
    """/dev/full as --json: the count runs, the write fails: one line naming the path, exit 1 (docs/exit-codes.md)."""
    from sandbox.commands import outputs
    with pytest.raises(sandbox.errors.OutputFailed, match="--json /dev/full: cannot write"):
        outputs.write_output("--json", "/dev/full", json.dumps([{"variant": "cupy.v1"}]))
    outputs.write_output("--csv", "t.csv", "a,b\n")  # a regular file: through a temporary file and a rename
    assert files_under(workdir) == ["t.csv"] and (workdir / "t.csv").read_text() == "a,b\n"
    # stdout itself full
    class Full(io.StringIO):
        def write(self, text):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("sys.stdout", Full())
    assert cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err == "error: cannot write to standard output (No space left on device)\n"


def test_internal_errors_exit_1_with_one_line_and_the_traceback_in_a_log(workdir, capsys, monkeypatch):
    from sandbox.commands import list_variants
    monkeypatch.setattr(list_variants, "main", lambda args: int("not a number"))  # a ValueError from inside
    assert cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: ValueError: invalid literal for int()") and err.count("\n") == 1
    log = err.split("(traceback: ")[1].rstrip(")\n")
    assert "Traceback" in open(log).read()


def test_api_refusals_name_the_argument():
    with pytest.raises(RefusedRequest, match=r"max_context_len=1,000,000,000\); the bound is 8 GiB"):
        DecodeProblem.random(0, max_context_len=10**9)
    problem = DecodeProblem.random(1, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=32, block_size=16,
                                   max_context_len=20)
    with pytest.raises(RefusedRequest, match=r"config must be a dict NAME: VALUE .* got str 'threads=64'"):
        sandbox.run("cupy.v1", *problem.arrays(), config="threads=64")
    big_endian = problem.block_tables.astype(">i4")
    with pytest.raises(RefusedRequest, match=r"block_tables.dtype must be int32, got int32 in non-native byte order "
                                             r"\(>i4\)"):
        sandbox.run("numpy.gather", problem.query, problem.key_cache, problem.value_cache, big_endian,
                    problem.context_lens)


# ---------------------------------------------------------------- every command's parser

def command_parsers() -> dict:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return dict(sub.choices)


def numeric_flags(parser) -> list:
    return [a for a in parser._actions if a.option_strings and a.type in (int, float)
            or getattr(a.type, "__name__", "") in ("number", "integer")]


def test_the_table_and_the_fuzz_cover_every_registered_command():
    assert set(command_parsers()) == set(cli.COMMANDS)
    tabled = {argv[0] for argv, _ in REFUSED if isinstance(argv, list)} | {"compare", "sweep"}
    missing = set(cli.COMMANDS) - tabled
    assert not missing, f"commands without a refusal case in REFUSED: {sorted(missing)}"


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_numeric_flag_is_checked_by_the_parser(command, capsys):
    """Each numeric flag takes numbers.real/integer: nan, inf, 1e308 and garbage never reach the command."""
    parser = command_parsers()[command]
    for action in numeric_flags(parser):
        assert action.type not in (int, float), f"{command} {action.option_strings[0]}: use sandbox.commands.numbers"
        for bad in ("nan", "inf", "-inf", "1e999", "abc", ""):
            with pytest.raises(SystemExit) as refused:
                parser.parse_args([action.option_strings[0], bad])
            err = capsys.readouterr().err
            assert refused.value.code == 2 and f"argument {action.option_strings[0]}" in err and err.count("\n") == 1


def fuzz_tokens(parser, rng: random.Random) -> list[str]:
    """A random command line: some of the parser's flags and positional junk, values from a hostile pool."""
    flags = [s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")]
    pool = ["nan", "inf", "-1", "0", "1", "16", "1e308", "-0", "", " ", "a,b", ",", "16,", "x" * 300, "\x00",
            "--", "-", "numba.*", "cupy.v1", "wrong", "1x2x3/4x5", "mla:1x2x3", "/dev/full", "/", "é", "%s", "{}"]
    argv = []
    for _ in range(rng.randint(0, 6)):
        if flags and rng.random() < 0.6:
            argv.append(rng.choice(flags))
        if rng.random() < 0.8:
            argv.append(rng.choice(pool))
    return argv


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_fuzzed_command_lines_parse_or_are_refused_in_one_line(command, capsys):
    """Random argument strings (seeded: rerun with FUZZ_SEED) either parse or are refused in one line with
    SystemExit(2) (before any work: cli.main never reaches the command); never another exception or a traceback."""
    parser = command_parsers()[command]
    rng = random.Random(f"{FUZZ_SEED}:{command}")
    refused = 0
    for i in range(FUZZ_CASES_PER_COMMAND):
        argv = fuzz_tokens(parser, rng)
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            refused += 1
            err = capsys.readouterr().err
            assert exc.code == 2 and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
        except Exception as exc:  # noqa: BLE001 - anything else is the failure this test hunts
            raise AssertionError(f"python -m sandbox {command} {argv!r} (case {i} of seed {FUZZ_SEED}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        else:
            if any(a in ("nan", "inf", "1e308") for a in argv):  # a parsed 'nan' must have been a name or path
                ns = parser.parse_args(argv)
                for value in vars(ns).values():
                    assert not (isinstance(value, float) and not np.isfinite(value)), (argv, ns)
    assert refused > 0
    capsys.readouterr()


@pytest.mark.parametrize("name", ["numpy.gather", "cupy.v1"])
def test_a_launch_uses_the_tables_it_was_prepared_with(name):
    """prepare, then edit block_tables in place (an entry = the block count: out of bounds), then launch: the
    prepared variant owns the validated copies (runner.own_index_arrays), so it reads nothing out of bounds."""
    from sandbox.variant import runner
    problem = DecodeProblem.random(9, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16,
                                   max_context_len=40)
    before = runner.run_problem(name, problem)
    prepared, _ = runner.prepare(name, problem, "cpu")
    problem.block_tables[1, 0] = problem.num_blocks
    problem.context_lens[0] = 10**6
    prepared.launch()
    np.testing.assert_array_equal(np.asarray(prepared.result()), before)
