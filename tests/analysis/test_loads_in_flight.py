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


# A cp.async pipeline of `stages` groups of one 16-byte copy each: the loop commits a group, then waits with
# wait_group(stages - 1), which leaves the younger stages - 1 groups pending: `stages` copies are in flight across
# every wait (SASS: LDGSTS, LDGDEPBAR, DEPBAR.LE SB0, stages - 1).
PIPELINE = """
__device__ __forceinline__ void copy16(void* smem, const void* gmem) {{
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(gmem));
}}
extern "C" __global__ void pipeline(const float4* __restrict__ x, float* __restrict__ out, int iterations) {{
    __shared__ float4 ring[{stages}][128];
    int i = threadIdx.x;
    float s = 0.f;
    for (int t = 0; t < {stages} - 1; ++t) {{
        copy16(&ring[t][i], x + (size_t)t * 128 + i);
        asm volatile("cp.async.commit_group;");
    }}
    #pragma unroll 1
    for (int t = 0; t < iterations; ++t) {{
        int next = t + {stages} - 1;
        copy16(&ring[next % {stages}][i], x + (size_t)next * 128 + i);
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group {keep};" ::: "memory");
        float4 v = ring[t % {stages}][i];
        s += v.x * v.y + v.z * v.w;
    }}
    out[i] = s;
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("stages", [1, 3, 4])
def test_cp_async_groups_left_pending_stay_in_flight(stages, arch):
    """wait_group 0 waits for the one copy of its iteration (1 per wait); wait_group 2 / 3 leave 2 / 3 younger
    groups pending, so 3 / 4 copies are in flight across each wait and each wait retires a third / a quarter."""
    code = PIPELINE.format(stages=stages, keep=stages - 1)
    compiled = nvrtc.compile_cubin(code, ["pipeline"], arch=arch)
    listing = sass.function_sass(compiled.cubin, compiled.lowered["pipeline"])
    assert f"DEPBAR.LE SB0, {hex(stages - 1)}" in listing and "LDGDEPBAR" in listing, listing
    got = loads_in_flight.read(listing)
    assert got.loops and got.loads == 1 and got.load_bytes == 16, got
    assert got.loads_in_flight == stages and got.per_wait == pytest.approx(stages), got
    assert got.waits == pytest.approx(1 / stages), got


def test_depbar_forms_and_groups():
    """LDGDEPBAR commits a group (an empty one too); DEPBAR.LE SBn, k retires the oldest until k are left; a bare
    DEPBAR commits the open group and waits for everything. Read whole (no loop), copies pending at the end wait."""
    listing = """
        /*0000*/                   LDGSTS.E.128 [R2], desc[UR4][R4.64] ;
        /*0010*/                   LDGSTS.E.128 [R2+0x10], desc[UR4][R6.64] ;
        /*0020*/                   LDGDEPBAR ;
        /*0030*/                   LDGSTS.E.128 [R2+0x20], desc[UR4][R8.64] ;
        /*0040*/                   LDGDEPBAR ;
        /*0050*/                   LDGDEPBAR ;
        /*0060*/                   DEPBAR.LE SB0, 0x2 ;
        /*0070*/                   LDGSTS.E.128 [R2+0x30], desc[UR4][R10.64] ;
        /*0080*/                   DEPBAR ;
"""
    instructions, _ = loads_in_flight.parse(listing)
    assert [loads_in_flight.depbar_limit(i) for i in instructions if i.opcode == "DEPBAR"] == [2, 0]
    first = loads_in_flight.scan(instructions[:7])   # groups (2, 1, 0): .LE 2 retires 2 of 3 copies; (1, 0) wait at the end
    assert first["waits"] == pytest.approx(2 / 3 + 1) and first["max_batch"] == 3 and first["groups"] == (1, 0)
    whole = loads_in_flight.scan(instructions)       # the bare DEPBAR waits for (1, 0) and the open 1: all done
    assert whole["loads"] == 4 and whole["waits"] == pytest.approx(2 / 3 + 1) and whole["groups"] == ()
    assert whole["max_batch"] == 3
