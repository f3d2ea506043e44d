"""Memory traffic of kernel launches counted on the CPU, under Nsight Compute's metric names.

    RawLaunch                    the contract (sandbox/cpucuda/raw.py): what a capture (CPU executor, Numba
                                 simulator) hands over
    requests.group(records, sites), global_request(...), shared_request(...)   per-lane accesses -> requests
    count(launches, device) -> CallTraffic      metrics per launch, block and site; L2 across the launches
    metrics.METRICS                             the metric names, in report order
"""
from sandbox.cpucuda import traffic as _executor_traffic
from sandbox.cpucuda.raw import COUNTERS, OPS, SECTOR_DTYPE, SITE_BLOCK_DTYPE, SPACES, RawLaunch, Site

from .count import CallTraffic, Traffic, count
from .metrics import METRICS
from .requests import RECORD_DTYPE, global_request, group, shared_request

_executor_traffic.set_counter(count)  # sandbox.cpucuda.last_traffic(device) counts with the core

__all__ = ["CallTraffic", "Traffic", "count", "METRICS", "COUNTERS", "OPS", "SPACES", "SECTOR_DTYPE",
           "SITE_BLOCK_DTYPE", "RawLaunch", "Site", "RECORD_DTYPE", "global_request", "group", "shared_request"]
