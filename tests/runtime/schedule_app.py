"""The app of the schedule fleet test: one schedule, every second, of one quick task."""

from __future__ import annotations

from typing import Any

from taskfuse.runtime import App

app = App("schedule-fleet")


@app.periodic("* * * * * *", tz="UTC", name="every-second", grace_s=5)
@app.task("tick", timeout=30)
def tick(ctx: Any, payload: Any) -> Any:
    return payload
