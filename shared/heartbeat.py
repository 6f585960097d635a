"""A liveness file for container health checks (the image's HEALTHCHECK runs ``python -m launch.health``).

When ``WARPPIPE_HEALTH_FILE`` names a file, the learner and each actor rewrite it at most every ``EVERY`` seconds with
``{"role", "pid", "time", "host", "ports"}``; the check passes if that process lives, wrote recently and every listed
port accepts a connection: the loop runs and the sockets are bound.
"""

from __future__ import annotations

import json
import os
import time

HEALTH_FILE_ENV = "WARPPIPE_HEALTH_FILE"
EVERY = 5.0


class Heartbeat:
    """Writes the liveness file (nothing when ``WARPPIPE_HEALTH_FILE`` is unset)."""

    def __init__(self, role: str, host: str = "", ports: tuple[int, ...] = ()):
        self.path = os.environ.get(HEALTH_FILE_ENV, "")
        self.info = {"role": role, "pid": os.getpid(), "host": host, "ports": list(ports)}
        self._last = -EVERY
        self.refused = 0  # beats a full or failing disk refused: the check then sees the file age

    def beat(self) -> None:
        now = time.monotonic()
        if not self.path or now - self._last < EVERY:
            return
        self._last = now
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(dict(self.info, time=time.time()), fh)
            os.replace(tmp, self.path)  # atomic: the check never reads half a file
        except OSError as exc:
            self.refused += 1
            if self.refused == 1:
                print(f"[HEALTH] liveness file {self.path} not written ({exc}); retried at every beat", flush=True)
