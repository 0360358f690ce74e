"""The terminal monitor: replays or follows a trace (`lab watch TRACE [--follow]`).

Entry point: `tui.app.run_watch`; the app factory shared with the tests: `tui.app.create_app`.
"""
