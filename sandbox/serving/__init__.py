"""Online serving simulator: requests arrive over time and a vLLM-like scheduler serves them on the
real BlockManager (or a contiguous arena), each step timed by a cost model (python -m sandbox serving).

Reading order: workloads (requests and arrivals) -> engine (the step loop) -> kv_paged / kv_contiguous
(memory) -> cost (step time) -> metrics (one point's figures) -> run (allocators x rates, run folder)
-> plots.
"""
