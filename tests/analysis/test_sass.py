"""sandbox.analysis.sass: the census of a SASS listing (parsing), and the real kernels' machine code for sm_90 checked
against what their designs claim (16-byte K/V loads, no local memory, no float64), without a GPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from kernels.cupy_raw import common, gqa
from sandbox.analysis import nvrtc, sass

LISTING = """\
\t.target\tsm_90

//--------------------- .text.helper --------------------------
\t.section\t.text.helper,"ax",@progbits
        .other          helper,@"STV_DEFAULT"
        /*0000*/                   DADD R2, R2, R4 ;
        /*0010*/                   RET.REL.NODEC R20 `(kernel) ;
//--------------------- .text.kernel --------------------------
\t.section\t.text.kernel,"ax",@progbits
        .other          kernel,@"STO_CUDA_ENTRY STV_DEFAULT"
kernel:
        /*0000*/                   LDG.E.128.CONSTANT R8, desc[UR8][R42.64] ;
        /*0010*/               @P1 LDG.E.128.CONSTANT R12, desc[UR8][R42.64+0x40] ;
        /*0020*/              @!P0 LDG.E.U16.CONSTANT R3, desc[UR8][R4.64] ;
        /*0030*/                   LDG.E R5, desc[UR8][R6.64] ;
        /*0040*/                   LDG.E.64 R6, desc[UR8][R6.64] ;
        /*0050*/                   STG.E.128 desc[UR8][R2.64], R8 ;
        /*0060*/                   STG.E desc[UR8][R2.64], R8 ;
        /*0070*/                   STL.128 [R1], RZ ;
        /*0080*/                   LDL R9, [R1+0x4] ;
        /*0090*/                   LD.E R9, desc[UR8][R2.64] ;
        /*00a0*/                   LDS.128 R16, [R3] ;
        /*00b0*/                   STS [R3], R9 ;
        /*00c0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00d0*/                   SHFL.BFLY PT, R44, R86, 0x2, 0x1f ;
        /*00e0*/                   CALL.REL.NOINC `(helper) ;
        /*00f0*/                   F2F.F64.F32 R4, R3 ;
        /*0100*/                   RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR8][R2.64], R5 ;
        /*0110*/                   EXIT ;
.L_x_1:
        /*0120*/                   BRA `(.L_x_1);
        /*0130*/                   NOP;
"""


def test_listing_splits_into_functions_and_finds_the_kernel():
    functions = sass.split_functions(LISTING)
    assert list(functions) == ["helper", "kernel"]
    assert sass.entry_functions(functions) == ["kernel"]
    assert "DADD" in functions["helper"] and "DADD" not in functions["kernel"]


def test_census_counts_each_class_and_global_widths():
    c = sass.census(sass.split_functions(LISTING)["kernel"])
    assert c.instructions == 19
    assert c.global_loads == {128: 2, 16: 1, 32: 1, 64: 1} and c.vector_loads == 2
    assert c.global_stores == {128: 1, 32: 1}
    assert (c.local, c.generic, c.shared_loads, c.shared_stores) == (2, 1, 1, 1)
    assert (c.barriers, c.shuffles, c.calls, c.atomics, c.fp64) == (1, 1, 1, 1, 1)
    row = c.as_row()
    assert row["global_loads"] == "128b:2 64b:1 32b:1 16b:1" and row["vector_loads"] == 2


@pytest.mark.parametrize("modifiers, bits", [(".E.128.CONSTANT", 128), (".E.64", 64), (".E", 32), (".E.U16", 16),
                                             (".E.S8.CONSTANT", 8), (".E.EF.256", 256), ("", 32)])
def test_access_bits(modifiers, bits):
    assert sass.access_bits(modifiers) == bits


def test_disassemble_refuses_what_is_not_a_cubin():
    with pytest.raises(ValueError, match="cubin must be an ELF image"):
        sass.disassemble(b"not a cubin")


def test_function_sass_names_what_the_cubin_holds():
    name = gqa.kernel_name(16, 128, 4, "float16")
    compiled = nvrtc.compile_cubin(common.load_source(gqa.PATH), [name], arch="sm_90", options=common.OPTIONS)
    text = sass.function_sass(compiled.cubin, compiled.lowered[name])
    assert "LDG.E.128" in text
    with pytest.raises(sass.SassError, match="not in the cubin; it holds: _Z19paged_attention_gqa"):
        sass.function_sass(compiled.cubin, "_Z7missingv")


@pytest.fixture(scope="module")
def cuda_c_rows():
    """Census of the CUDA C attention variants at block sizes 1, 16, 128 (sm_90, head dim 128, float16)."""
    names = ["cupy.v1", "cupy.v2", "cupy.gqa", "cupy.rows", "cupy.dense"]
    return sass.collect(names, block_sizes=(1, 16, 128))


def _partition(rows, variant, block_size):
    [row] = [r for r in rows if r["variant"] == variant and r["block_size"] == block_size
             and r["kernel"] in ("main", "partition")]
    return row


@pytest.mark.parametrize("variant", ["cupy.v1", "cupy.v2", "cupy.gqa", "cupy.rows", "cupy.dense"])
def test_cuda_c_kernels_read_kv_in_16_byte_vectors_without_float64(cuda_c_rows, variant):
    for block_size in (1, 16, 128):
        row = _partition(cuda_c_rows, variant, block_size)
        assert row["vector_loads"] >= 2, row       # one K and one V vector load at least
        assert row["fp64"] == 0 and row["generic"] == 0 and row["atomics"] == 0, row


def test_rows_keeps_eight_vectors_in_flight_for_k_and_v_at_every_block_size(cuda_c_rows):
    """cupy.rows's claim: the block size changes index arithmetic only, so the loads issued per
    chunk (8 x 16 B for K, 8 for V) and the absence of local memory do not change with it; in
    gqa (vLLM's mapping) block size 1 leaves fewer vector loads than block size 16."""
    for block_size in (1, 16, 128):
        row = _partition(cuda_c_rows, "cupy.rows", block_size)
        assert row["vector_loads"] == 16 and row["local"] == 0, row
    assert _partition(cuda_c_rows, "cupy.gqa", 1)["vector_loads"] < _partition(cuda_c_rows, "cupy.gqa", 16)[
        "vector_loads"]


def test_sass_cli_table_json_and_dump_for_both_families():
    base = [sys.executable, "-m", "sandbox", "sass", "--variants", "cupy.write_cache", "numba.write_cache",
            "--block-sizes", "16"]
    rows = json.loads(subprocess.run(base + ["--json"], capture_output=True, text=True, check=True).stdout)
    assert {r["variant"] for r in rows} == {"cupy.write_cache", "numba.write_cache"}
    assert all(set(sass.COLUMNS) <= set(r) and r["fp64"] == 0 for r in rows)
    from sandbox.commands import sass as sass_command  # the table printed without --json, from the same rows
    table = sass_command.table(rows)
    assert "global loads (width:count)" in table
    assert any(line.startswith("cupy.write_cache ") and "128b:2" in line for line in table.splitlines()), table
    assert any(line.startswith("numba.write_cache [write_cache]") for line in table.splitlines()), table
    dump = subprocess.run(base[:6] + ["--block-sizes", "16", "--dump"], capture_output=True, text=True, check=True).stdout
    assert dump.startswith("// ===== cupy.write_cache [main] block_size=16") and "STG.E.128" in dump


def test_sass_cli_refuses_an_unknown_variant():
    done = subprocess.run([sys.executable, "-m", "sandbox", "sass", "--variants", "cupy.nope"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "unknown variant 'cupy.nope'" in done.stderr


def test_a_sweep_run_folder_gets_the_census_beside_the_resources(tmp_path):
    from sandbox.sweep.measure import static_resources
    rows, note = static_resources.collect_into(tmp_path, ["cupy.write_cache", "numpy.gather"], (16,))
    assert note == "" and {r["variant"] for r in rows} == {"cupy.write_cache"} and "images" not in rows[0]
    # float16, then the other precisions the GPU default races (bfloat16, an e4m3 cache) at block size 16
    assert [(r["dtype"], r["kv_dtype"]) for r in rows] == [("float16", "float16"), ("bfloat16", "bfloat16"),
                                                           ("float16", "float8_e4m3fn")]
    header, *lines = (tmp_path / "sass.csv").read_text().splitlines()
    census = [dict(zip(header.split(","), line.split(","), strict=True)) for line in lines]
    compiled = [r for r in rows if "registers" in r]
    assert [(c["dtype"], c["kv_dtype"]) for c in census] == [(r["dtype"], r["kv_dtype"]) for r in compiled]
    assert census[0]["variant"] == "cupy.write_cache" and census[0]["vector_loads"] == "2" and census[0]["local"] == "0"
    assert "images" not in (tmp_path / "resources.csv").read_text()


def test_the_wheel_lookup_behind_nvdisasm_and_the_cuda_headers():
    from sandbox.analysis.cuda_wheels import in_nvidia_wheels, pathfinder_lookup

    found = in_nvidia_wheels("bin/nvdisasm", ("nvidia.cuda_nvdisasm", "nvidia.cu13"))
    assert found is not None and found.name == "nvdisasm" and found.parent.parent.name == "cu13"
    assert in_nvidia_wheels("include/cuda_fp16.h").name == "cuda_fp16.h"
    assert in_nvidia_wheels("bin/no-such-tool") is None
    assert in_nvidia_wheels("bin/nvdisasm", ("no_such_namespace.cu13",)) is None
    assert pathfinder_lookup("find_nvidia_binary_utility", "nvdisasm").endswith("nvdisasm")
    assert pathfinder_lookup("find_nvidia_binary_utility", "no-such-tool") is None
    assert pathfinder_lookup("no_such_lookup", "nvdisasm") is None


# ---------------------------------------------------------------- NVRTC options: those CuPy really passes

DIVIDE = 'extern "C" __global__ void divide(float *x, const float *y) { x[threadIdx.x] /= y[threadIdx.x]; }'


def test_nvrtc_passes_cupys_options_and_ftz_changes_the_division_slow_path():
    assert nvrtc.cupy_options(("-std=c++17",)) == ("-std=c++17", "-ftz=true")
    assert nvrtc.cupy_options(()) == ("--std=c++14", "-ftz=true")  # CuPy's default standard when none is named
    compiled = nvrtc.compile_cubin(DIVIDE, arch="sm_90", options=common.OPTIONS)
    assert "-ftz=true" in compiled.options and "-std=c++17" in compiled.options
    functions = sass.disassemble(compiled.cubin)
    assert sass.entry_functions(functions) == ["divide"]  # a short name: nvdisasm pads its section header
    listing = "\n".join(functions.values())
    assert "div_rn_ftz_f32" in listing and "noftz" not in listing  # what the GPU runs under CuPy


@pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="compares with the installed CuPy")
def test_nvrtc_options_equal_what_the_installed_cupy_passes(monkeypatch):
    """Capture the options CuPy hands NVRTC for a RawModule (no GPU needed: the compile is stopped there)."""
    import cupy
    from cupy.cuda import compiler

    seen = []

    class Stop(Exception):
        pass

    def capture(self, options=(), *args, **kwargs):
        seen.append(tuple(options))
        raise Stop

    monkeypatch.setattr(compiler._NVRTCProgram, "compile", capture)
    monkeypatch.setattr(compiler, "_get_arch", lambda: "90")
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    with pytest.raises(Stop):
        cupy.RawModule(code=DIVIDE, options=common.OPTIONS).get_function("divide")
    keep = lambda opts: {o for o in opts if not o.startswith(("-I", "-arch", "--gpu-architecture"))}  # noqa: E731
    assert keep(seen[0]) == set(nvrtc.cupy_options(common.OPTIONS)), seen[0]


# ---------------------------------------------------------------- --variants as the sweep takes it

def test_resources_and_sass_take_variants_like_the_sweep_and_name_those_without_compile_report(capsys):
    from sandbox import cli
    assert cli.main(["resources", "--variants", "cupy.write*,numpy.gather", "--block-sizes", "16"]) == 0
    out = capsys.readouterr().out
    assert "cupy.write_cache" in out and "numba.write_cache" not in out
    assert "no compile_report (not compiled, no static resources): numpy.gather" in out
    assert cli.main(["sass", "--variants", "numpy", "cupy.write_cache", "--block-sizes", "16"]) == 0
    out = capsys.readouterr().out
    assert "cupy.write_cache" in out and "no compile_report (not compiled, no static resources): numpy.gather" in out
    assert cli.main(["resources", "--variants", "nothing.*"]) == 2
    assert "matches no registered variant" in capsys.readouterr().err
