"""`lab sweep` and `lab size`: many simulated runs over a space of values, and the best point.

    sweep.py         the plan (a grid of points times seeds), the run store, the table
    executors.py     where the runs go: local processes or a Dask cluster
    metrics_expr.py  report key paths and SLO constraints such as 'business.p99_s<=0.06'
    size.py          the search for the limits that keep every SLO and do best
    choice.py        `--threads-or-async`: the same search on threads and as coroutines
    cli.py           the `lab sweep` and `lab size` subcommands
"""
