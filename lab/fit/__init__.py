"""`lab fit`: learn a scenario's world from a recorded run, so the lab predicts that run.

A trace written by `lab loadtest` (or by `taskfuse worker --trace`) holds every downstream call
(start, end, outcome), every move of every task, DB steps and business requests (load test),
and the limits the run used (both). From those, one module per job estimates:

    data.py               the trace as flat columns (calls, DB steps, submits, attempts)
    windows.py            outages and slowdowns: change points in error share and latency
    provider_capacity.py  servers, from latency against calls in flight
    service.py            durations: percentiles, lognormal / exponential with a KS figure
    ratelimit.py          the provider's token bucket, from when 429s start
    provider_errors.py    error kinds and their rates
    provider.py           the above, in the order they need each other, per downstream
    arrivals.py           closed / Poisson / scheduled arrivals per batch
    programs.py           each batch's task program: DB steps, calls per task, local work
    hangs.py              attempts that outlived their timeout: the program's `hang` step
    pools.py              pool sizes, waits and hold times
    business.py           business traffic: rate, schedule, query time
    recorded_limits.py    the limits the run used, from the trace header (load test or worker)
    world.py              all of it for one run, as world keys plus the recorded limits
    writer.py             the one place fitted files are written: a scenario and its limits file
    report.py             the text report: every number with its interval or why it is unknown
    fitting.py            a trace in, the fit and the fitted files out (fit_trace, fitted_files)
    cli.py                the `lab fit` subcommand

Each number carries a 95 % interval or says it is not identifiable from this run (a rate limit
never reached, a capacity never exceeded), see estimate.py.
"""
