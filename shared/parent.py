"""Whether the process that started this one is still there: children of a SIGKILLed launcher stop by themselves."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable


def orphan_check() -> Callable[[], bool]:
    """In a child process: a function that is True once the process that started it has died.

    The parent is the one multiprocessing recorded when it started this process, not ``os.getppid()`` read
    now: a launcher SIGKILLed while this child was still importing has already left it re-parented, and a
    parent read at that point would never die (found: a benchmark sender spun on after its benchmark was
    killed, under load). Outside multiprocessing (no recorded parent) the parent is ``os.getppid()``.
    """
    recorded = multiprocessing.parent_process()
    parent = recorded.pid if recorded is not None and recorded.pid else os.getppid()
    return lambda: os.getppid() != parent
