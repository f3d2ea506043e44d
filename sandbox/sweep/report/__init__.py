"""Reporting a sweep from its rows: the summary's tables (summary, mla_summary, model_summary, text_table), the
goals, the figures (plots) and the comparison of two runs (diff). Nothing here measures or launches."""
