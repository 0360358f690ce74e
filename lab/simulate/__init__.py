"""`lab simulate`: a scenario run in virtual time, the same core deciding as in production.

    sim.py         the driver: workers, claims, attempts and the world, as simpy processes
    client.py      a downstream call under its client policy (the runtime's calls.py twin)
    coroutines.py  the async executor: one worker process's event loop and its coroutines
    simstore.py    the simulator's task store: the transition table, in memory
    run.py         one run: a scenario and a seed in, a report and a trace out
    report.py      the report built from a finished Simulation
    timeline.py    the sampled series a trace carries for the monitor and plots
    cli.py         the `lab simulate` subcommand
"""
