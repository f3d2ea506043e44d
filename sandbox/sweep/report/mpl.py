"""matplotlib's pyplot on the Agg backend (files, no display), loaded at the first figure drawn: a report that
draws nothing never imports matplotlib."""
from __future__ import annotations


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
