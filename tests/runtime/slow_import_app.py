"""Task functions whose module takes a while to import, as a module that loads a model or a
large library does. Its process kind's timeout is shorter than the import: the task process
must have imported it before the first attempt's clock runs (`ProcessPool.warm`)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

#: Seconds this module's import takes (in the test process, in the fork server, or in a task
#: process that imports it itself when the fork server was started before it was named).
IMPORT_S = 2.0

time.sleep(IMPORT_S)
logging.getLogger("slow_import_app").info("imported in pid %d", os.getpid())


def pid(ctx: Any, payload: Any) -> int:
    return os.getpid()
