"""``make eval``: the papers' figures reproduced in the virtual-time simulator, side by side
with the papers' numbers, with 95 % confidence intervals (see ``docs/evaluation.md``).

Generic: it runs the tasks every registered offload's ``evaluation`` hook lists (each task one
simulation run, a JSON-able result), on a local process pool or on a Dask cluster, and asks the
offload to summarise its results (a section of ``build/eval/summary.json``, a section of
``build/eval/report.md``, its plots). It names no offload.
"""
