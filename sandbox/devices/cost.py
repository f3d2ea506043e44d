"""What a problem costs to run on the CPU, said before it starts: multiply-adds x the backend's measured rate.

    estimate(multiply_adds, family, backend, traffic=False) -> Estimate | None   None on a GPU (no bound there)
    guard(what, multiply_adds, family, backend, force=False, warn=print) -> Estimate | None

A problem estimated past WARN_SECONDS is announced with its estimate before it starts; past REFUSE_SECONDS it
is refused (a ValueError: exit 2) unless the command was given --force. SANDBOX_WARN_SECONDS and
SANDBOX_REFUSE_SECONDS replace the bounds (tests use tiny ones). check, the sweep and traffic call guard.

RATES were measured once, on the 2-core machine without a GPU the project is developed on (other work
running beside it), by timing the second run of each variant on DecodeProblem.random(1, num_seqs=4,
num_heads=8, num_kv_heads=2, head_dim=128, block_size=16, max_context_len=512, dtype="float16") (3.4 M
multiply-adds): the Numba simulator 2.8e4 (numba.naive, 119 s) to 6.3e4 (numba.split) multiply-adds/s,
the CUDA C executor 1.6e7 (cupy.v1) to 2.9e7 (cupy.gqa), NumPy 8.3e7 (numpy.gather), Triton's interpreter
7.8e5 (triton.naive, 4.3 s) to 5.2e6 (triton.unified). Each family's
slowest is its rate: an estimate errs long. A traffic count costs TRAFFIC_FACTOR times a plain run
(the Numba capture costs 2-5x the simulator's time, the executor's traffic mode 7-12x a plain launch, the
Triton capture 1.1-1.3x a plain interpreted run).
"""
from __future__ import annotations

import dataclasses
import os
from ..errors import RefusedRequest

# multiply-adds per second of a plain run, per CPU stand-in (see the module docstring)
RATES = {"numba": 2.8e4, "cupy": 1.6e7, "numpy": 8.3e7, "triton": 7.8e5}
WHERE = {"numba": "the Numba simulator", "cupy": "the CUDA C executor", "numpy": "NumPy",
         "triton": "Triton's interpreter"}
TRAFFIC_FACTOR = {"numba": 5.0, "cupy": 12.0, "numpy": 1.0, "triton": 1.5}
WARN_SECONDS = 60.0
REFUSE_SECONDS = 1800.0


class TooLong(RefusedRequest):
    """A problem estimated past the hard bound, refused before it starts (a command's exit 2)."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    seconds: float
    multiply_adds: int
    rate: float
    where: str

    def describe(self) -> str:
        return (f"estimated {_duration(self.seconds)} on {self.where} ({self.multiply_adds:.3g} multiply-adds at "
                f"{self.rate:.2g}/s, measured: sandbox/devices/cost.py)")


def bounds() -> tuple[float, float]:
    """(warn, refuse) seconds: WARN_SECONDS / REFUSE_SECONDS, or the environment's; ValueError naming a bad one."""
    out = []
    for variable, default in (("SANDBOX_WARN_SECONDS", WARN_SECONDS), ("SANDBOX_REFUSE_SECONDS", REFUSE_SECONDS)):
        text = os.environ.get(variable)
        try:
            value = default if text in (None, "") else float(text)
        except ValueError:
            raise RefusedRequest(f"{variable}={text!r}: expected seconds (a number >= 0)") from None
        if value < 0:
            raise RefusedRequest(f"{variable}={text!r}: expected seconds (a number >= 0)")
        out.append(value)
    return out[0], out[1]


def estimate(multiply_adds: int, family: str, backend: str, traffic: bool = False) -> Estimate | None:
    """The time `multiply_adds` take on the CPU stand-in of `family`; None on a GPU or for a family without a rate."""
    if backend == "gpu" or family not in RATES:
        return None
    rate = RATES[family] / (TRAFFIC_FACTOR[family] if traffic else 1.0)
    where = WHERE[family] + (" (counting traffic)" if traffic else "")
    return Estimate(int(multiply_adds) / rate, int(multiply_adds), rate, where)


def guard(what: str, multiply_adds: int, family: str, backend: str, force: bool = False, warn=print,
          traffic: bool = False) -> Estimate | None:
    """Announce (warn(line)) a problem estimated past the warning bound; refuse one past the hard bound (ValueError
    naming `what`, the estimate and --force) unless force."""
    found = estimate(multiply_adds, family, backend, traffic)
    if found is None:
        return None
    warn_s, refuse_s = bounds()
    if found.seconds > refuse_s and not force:
        raise TooLong(f"{what}: {found.describe()}, over the {_duration(refuse_s)} bound "
                         "(SANDBOX_REFUSE_SECONDS); make it smaller, or give --force to run it anyway")
    if found.seconds > warn_s:
        warn(f"note: {what}: {found.describe()}")
    return found


def shape_multiply_adds(shape) -> int:
    """A sweep shape's multiply-adds before its problem is built (an upper bound: every query token reads the
    whole context): decode SEQSxTOKENSxHEADS/KVxHEADDIM (a shared prompt's suffix tokens counted), MLA (576 + 512
    dims per head and token read, topk tokens when sparse): the shape's own bound (its multiply_adds_bound)."""
    return shape.multiply_adds_bound()


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
