"""A liveness file for container health checks (the image's HEALTHCHECK runs ``python -m launch.health``).

When ``WARPPIPE_HEALTH_FILE`` names a file, a process rewrites it with ``{"role", "pid", "time", "host", "ports",
"phase"}``: the learner from a thread of its own every ``EVERY`` seconds for its whole life (``start``: training,
compiling, saving, the final evaluation alike), an actor from its loop (``beat``). The check passes if that process
lives, wrote recently and every listed port accepts a connection: the ports bound in the phase it names (none once
the learner's sockets close). The file is overwritten in place (shared/writes.py ``InPlaceRecord``), so a full disk
does not stop it once made.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable

from shared.writes import InPlaceRecord, RefusedWrites

HEALTH_FILE_ENV = "WARPPIPE_HEALTH_FILE"
EVERY = 5.0
WIDTH = 4096  # bytes of the padded record, a few hundred ports (a longer one grows the file, while there is room)


class Heartbeat:
    """Writes the liveness file ``path`` (None: ``WARPPIPE_HEALTH_FILE``'s; empty: nothing is written)."""

    def __init__(self, role: str, host: str = "", ports: Iterable[int] = (), phase: str = "", path: str | None = None):
        self.path = os.environ.get(HEALTH_FILE_ENV, "") if path is None else path
        self.info = {"role": role, "pid": os.getpid(), "host": host, "ports": [int(p) for p in ports], "phase": phase}
        self.record = InPlaceRecord(self.path, WIDTH)
        # a refused write is said at a steady rate; the check then sees the file's age
        self.refused = RefusedWrites(lambda line: print(line, flush=True), "[HEALTH]", "the health check sees its age")
        self._lock = threading.Lock()
        self._last = -EVERY
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, phase: str, ports: Iterable[int] = (), host: str | None = None) -> None:
        """From now on the file names ``phase`` and the ``ports`` bound in it (and ``host``, if given); written at once."""
        with self._lock:
            self.info.update(phase=phase, ports=[int(p) for p in ports])
            if host is not None:
                self.info["host"] = host
        self.write()

    def beat(self) -> None:
        """Write the file if the last write is ``EVERY`` seconds old: a loop's call."""
        if self.path and time.monotonic() - self._last >= EVERY:
            self.write()

    def write(self) -> None:
        """Write the file now."""
        if not self.path:
            return
        with self._lock:
            self._last = time.monotonic()
            text = json.dumps(dict(self.info, time=time.time()))
            self.refused.attempt(f"the liveness file {self.path}", self.record.write, text)

    def start(self) -> Heartbeat:
        """Write now and then every ``EVERY`` seconds from a daemon thread until ``stop``, whatever the caller does."""
        if self.path and self._thread is None:
            self._thread = threading.Thread(target=self._beating, name="heartbeat", daemon=True)
            self._thread.start()
        return self

    def _beating(self) -> None:
        while True:
            self.write()
            if self._stop.wait(EVERY):
                return

    def stop(self) -> None:
        """End ``start``'s thread (the file keeps its last write)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
