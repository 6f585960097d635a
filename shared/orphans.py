"""Whether the process that started this one is still there: children of a SIGKILLed launcher stop by themselves."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable


def orphan_check() -> Callable[[], bool]:
    """In a child process: a function that is True once the process that started it has died. The parent is the one
    multiprocessing recorded (else ``os.getppid()``): a child re-parented while still importing would wait forever."""
    recorded = multiprocessing.parent_process()
    parent = recorded.pid if recorded is not None and recorded.pid else os.getppid()
    return lambda: os.getppid() != parent
