"""sandbox.analysis.loads_in_flight: the loads a warp keeps in flight, read from the SASS of hand-made kernels whose
answer is known (compiled for sm_80 and sm_90 through NVRTC, no GPU), and from the project's kernels."""
from __future__ import annotations

import pytest

from sandbox.analysis import loads_in_flight, nvrtc, sass

# n independent 8-byte loads per thread, then one sum that uses them all. (With 16-byte vectors ptxas starts
# the math on the first five of eight before issuing the rest: 5 back to back, which the reader reports.)
INDEPENDENT = """
extern "C" __global__ void independent(const float2* __restrict__ x, float* __restrict__ out, int stride) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float2 v[{n}];
    #pragma unroll
    for (int k = 0; k < {n}; ++k) v[k] = x[i + k * stride];
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < {n}; ++k) s += v[k].x * v[k].y;
    out[i] = s;
}}
"""

# A dependent chain: each load's address is the previous load's value (a table entry, then the row it names).
CHAIN = {
    2: """
extern "C" __global__ void chain(const int* __restrict__ table, const float* __restrict__ x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = x[table[i]];
}
""",
    3: """
extern "C" __global__ void chain(const int* __restrict__ table, const int* __restrict__ rows,
                                 const float* __restrict__ x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = x[rows[table[i]]];
}
""",
}

# A loop whose body loads 4 vectors before their math: the hot loop is read, not the prologue.
LOOP = """
extern "C" __global__ void loop(const float4* __restrict__ x, float* __restrict__ out, int stride, int iterations) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.f;
    for (int t = 0; t < iterations; ++t) {
        const float4* row = x + (size_t)t * 4 * stride + i;
        float4 a = row[0], b = row[stride], c = row[2 * stride], d = row[3 * stride];
        s += a.x * b.y + c.z * d.w + a.w * d.x;
    }
    out[i] = s;
}
"""


def _read(code: str, name: str, arch: str) -> loads_in_flight.LoadsInFlight:
    compiled = nvrtc.compile_cubin(code, [name], arch=arch)
    return loads_in_flight.read(sass.function_sass(compiled.cubin, compiled.lowered[name]))


@pytest.fixture(scope="module", autouse=True)
def _toolchain():
    try:
        nvrtc.cuda_include_dir()
        sass.nvdisasm_path()
    except Exception as exc:  # the CUDA wheels are default dependencies: say so rather than pass silently
        pytest.fail(f"NVRTC / nvdisasm unavailable ({exc}); make setup installs them")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_independent_loads(n, arch):
    got = _read(INDEPENDENT.format(n=n), "independent", arch)
    assert (got.loads, got.loads_in_flight, got.waits, got.chain) == (n, n, 1, 1), got
    assert got.per_wait == n and got.load_bytes == 8 * n and got.loops == ()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("links", [2, 3])
def test_dependent_chain(links, arch):
    got = _read(CHAIN[links], "chain", arch)
    assert (got.loads, got.chain, got.waits, got.loads_in_flight) == (links, links, links, 1), got
    assert got.per_wait == 1.0


def test_hot_loop_is_read():
    got = _read(LOOP, "loop", "sm_90")
    assert got.loops, "the loop was not found"
    assert got.loads_in_flight >= 4 and got.chain == 1, got


def test_parse_expands_register_pairs_and_labels():
    listing = """
        /*0000*/                   LDG.E.64 R4, desc[UR8][R2.64] ;
.L_x_1:
        /*0010*/                   IMAD.WIDE R6, R4, 0x4, R8 ;
        /*0020*/                   LDG.E.128 R12, desc[UR8][R6.64+0x10] ;
        /*0030*/                   FADD R0, R15, R5 ;
        /*0040*/               @P0 BRA `(.L_x_1) ;
"""
    instructions, labels = loads_in_flight.parse(listing)
    assert labels == {".L_x_1": 0x10} and [i.opcode for i in instructions][-1] == "BRA"
    assert loads_in_flight.loops(instructions, labels) == [(0x10, 0x40)]
    got = loads_in_flight.read(listing)  # the loop: 1 load (its address from outside the loop), used once
    assert (got.loads, got.waits, got.chain) == (1, 1, 1)
    whole = loads_in_flight.scan(instructions)  # R5 (high half of the .64 pair) feeds the address: a chain of 2
    assert whole["chain"] == 2 and whole["waits"] == 2


def test_every_cuda_c_kernel_of_a_call_is_read_from_its_sass():
    """cupy.v1's K loop issues 3 16-byte vectors back to back before the first use (the reduce kernel of a split-KV
    variant has its own reading); nothing is declared by hand any more."""
    import sandbox
    from sandbox.variant import registry

    problem = sandbox.DecodeProblem.random(seed=3, num_seqs=2, context_lens=[600, 600], num_heads=8, num_kv_heads=2,
                                           head_dim=128, block_size=16, dtype="float16", share_prefix=False)
    v1 = sandbox.traffic("cupy.v1", problem)["model"]["kernels"]
    assert [k["loads_in_flight_source"] for k in v1] == ["sass"] and v1[0]["loads_in_flight"] >= 2
    gqa = sandbox.traffic("cupy.gqa", problem)["model"]["kernels"]
    assert len(gqa) == 2 and all(k["loads_in_flight_source"] == "sass" for k in gqa)
    assert gqa[0]["loads_per_wait"] != gqa[1]["loads_per_wait"]  # the reduce kernel is read on its own
    assert not any(hasattr(registry.get(n).module, "LOADS_IN_FLIGHT") for n in registry.variants("cupy"))
