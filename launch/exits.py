"""How warppipe's programs begin and end: stop signals taken from their first line, one mapping of what ended a
program to its exit code."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from learner.thread_watch import ThreadDied
from learner.trainer import NonFiniteUpdate
from shared.errors import ConfigError

EXIT_CONFIG = 2  # a bad option or value, named on stderr
EXIT_FAILED = 1  # the run stopped on an error it saved its last good weights from
# (3: a learner's failure repeated from one checkpoint, launch/failures.py; 3 and 4 of launch.actor: no slot, version skew)
EXIT_UNWRITTEN = 5  # the run ended and its training is saved, but some final-evaluation results could not be written


@dataclass
class StopSignals:
    """Ctrl-C and SIGTERM as events: ``stopping`` for either, ``terminated`` for SIGTERM (seconds left). Installed
    first thing, so a signal during start-up (as PID 1 a default SIGTERM would be ignored) ends the program cleanly."""

    stopping: threading.Event = field(default_factory=threading.Event)
    terminated: threading.Event = field(default_factory=threading.Event)

    def install(self) -> StopSignals:
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def _on_sigterm(self, *_: object) -> None:
        self.terminated.set()
        self.stopping.set()


def exit_code(body: Callable[[], int]) -> int:
    """``body()``'s exit code; a bad configuration is said and exits 2, a non-finite update or a dead thread exits 1."""
    try:
        return body()
    except (ConfigError, NonFiniteUpdate, ThreadDied) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
