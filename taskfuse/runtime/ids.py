"""Task ids minted by a worker process: a leaf module, so every role can import it."""

from __future__ import annotations

import secrets


def new_task_id() -> str:
    """A task id no other process will mint: 80 random bits as 20 hex digits."""
    return secrets.token_hex(10)
