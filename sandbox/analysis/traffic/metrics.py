"""The metric names the traffic counts are reported under: Nsight Compute's, so a GPU run diffs against them.

    REQUEST_METRICS[(op, space)] -> (requests metric, sectors-or-wavefronts metric, bank-conflicts metric or None)
    METRICS                     every metric a Traffic reports, in report order

Global memory: `l1tex__t_requests_..._op_{ld,st,atom}` count warp-level requests, `l1tex__t_sectors_...`
the distinct 32-byte sectors they touch. Shared memory: `smsp__inst_executed_op_shared_{ld,st,atom}`
count warp-level instructions, `l1tex__data_pipe_lsu_wavefronts_mem_shared_op_*` their wavefronts and
`l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_*` the wavefronts beyond the ideal. `lts__t_sectors_op_*`
are the sectors the requests bring to L2 (L1 is not modelled: every requested sector counts), `dram__bytes_*`
what the L2 model sends to DRAM.
"""
from __future__ import annotations

from sandbox.cpucuda.raw import COUNTERS

_GLOBAL = "l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum"
_OP = {"load": "ld", "store": "st", "atomic": "atom"}

REQUEST_METRICS = {}
for _op, _short in _OP.items():
    REQUEST_METRICS[(_op, "global")] = (_GLOBAL.format(what="requests", op=_short),
                                        _GLOBAL.format(what="sectors", op=_short), None)
    REQUEST_METRICS[(_op, "shared")] = (f"smsp__inst_executed_op_shared_{_short}.sum",
                                        f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{_short}.sum",
                                        f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{_short}.sum")

L2_METRICS = {"load": "lts__t_sectors_op_read.sum", "store": "lts__t_sectors_op_write.sum",
              "atomic": "lts__t_sectors_op_atom.sum"}
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"

METRICS = tuple(
    [m for key in REQUEST_METRICS for m in REQUEST_METRICS[key] if m is not None]
    + list(L2_METRICS.values()) + [DRAM_READ, DRAM_WRITE] + list(COUNTERS))

GLOBAL_LOAD_REQUESTS, GLOBAL_LOAD_SECTORS, _ = REQUEST_METRICS[("load", "global")]
SHARED_CONFLICTS = tuple(REQUEST_METRICS[(op, "shared")][2] for op in _OP)


def zero() -> dict:
    """Every metric at 0 (ints)."""
    return dict.fromkeys(METRICS, 0)
