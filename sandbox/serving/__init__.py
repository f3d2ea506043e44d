"""Online serving simulator: requests arrive over time and a vLLM-like scheduler serves them on the
real BlockManager (or a contiguous arena), each step timed by a cost model (python -m sandbox serving).

Reading order: workloads (the workload table, requests and arrivals) -> engine (the step loop) -> kv_paged /
kv_contiguous (memory) -> cost (roofline, swap) with kernel_time (--kernel), cost_sweep, cost_model, chosen by
cost_sources -> metrics (one point's figures) -> search (the knee, seeds, intervals) -> run (allocators x
seeds x searched rates, run folder) -> plots, swap_study.
"""
