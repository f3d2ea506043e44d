"""The block-size sweep: which variant is fastest at which block size, how close to the copy
bandwidth, and what paging costs against the dense baseline. CLI: ``python -m sandbox sweep``.

    measure.run.run_sweep(config) -> SweepOutcome   # results/<UTC>-sweep/{sweep.csv, meta.json, goals.json, *.png}
    report.diff.compare_runs(a, b, threshold)       # python -m sandbox compare RUN_A RUN_B

measure/ builds, checks, times and counts the points; report/ turns rows into tables, goals, figures and
comparisons; shapes.py and mla_shapes.py are the shape grammar both read (and `traffic`, ncu-check).
"""
