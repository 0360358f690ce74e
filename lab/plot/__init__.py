"""`lab plot`: recorded runs and sweeps drawn as pictures for a review.

    charts.py  the drawing (matplotlib, loaded only when a picture is asked for)
    cli.py     the `lab plot` subcommand
"""
