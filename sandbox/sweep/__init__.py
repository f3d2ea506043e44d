"""The block-size sweep: which variant is fastest at which block size, how close to the copy
bandwidth, and what paging costs against the dense baseline. CLI: ``python -m sandbox sweep``.

    run.run_sweep(config) -> SweepOutcome     # results/<UTC>-sweep/{sweep.csv, meta.json, goals.json, *.png}
    diff.compare_runs(a, b, threshold)        # python -m sandbox compare RUN_A RUN_B
"""
