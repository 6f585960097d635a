"""Container health check: ``python -m launch.health [--max-age S]``; exit 0 healthy, 1 not, with the reason.

Reads the liveness file ``WARPPIPE_HEALTH_FILE`` names (shared/heartbeat.py; padded with spaces, read again once if
a write was half done): its writer must be alive, have written within ``--max-age`` seconds, and each TCP port it lists
must accept a connection (the learner lists none once its sockets close: the final evaluation).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time

from launch.cli import UsageError, parse
from shared.heartbeat import HEALTH_FILE_ENV
from shared.writes import read_record

REREAD_AFTER_S = 0.05  # a read that met a write half done is tried again once, this much later


@dataclasses.dataclass
class HealthArgs:
    max_age: float = 60.0
    """Seconds since the liveness file's last report after which the process counts as stuck."""


def read_liveness(path: str) -> dict:
    """The liveness file's record; a text that does not parse is read again once (a write was half done)."""
    try:
        info = json.loads(read_record(path))
    except ValueError:
        time.sleep(REREAD_AFTER_S)
        info = json.loads(read_record(path))
    if not isinstance(info, dict):
        raise ValueError(f"a {type(info).__name__}, not a record")
    return info


def check(path: str, max_age: float) -> str:
    """'' when healthy, else the reason."""
    if not path:
        return f"{HEALTH_FILE_ENV} is not set"
    try:
        info = read_liveness(path)
    except (OSError, ValueError) as exc:
        return f"no readable liveness file {path!r} ({exc})"
    who = f"the {info.get('role', '?')}" + (f" ({info['phase']})" if info.get("phase") else "")
    try:
        os.kill(int(info["pid"]), 0)
    except (ProcessLookupError, PermissionError, KeyError, ValueError):
        return f"{who} process {info.get('pid')} is not running"
    age = time.time() - float(info.get("time", 0))
    if age > max_age:
        return f"{who} last reported {age:.0f}s ago (allowed {max_age:g}s): it is stuck"
    host = info.get("host") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "*", "::") else host
    for port in info.get("ports", []):
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
        except OSError as exc:
            return f"{who}'s port {host}:{port} refuses connections ({exc})"
    return ""


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(HealthArgs, argv, "python -m launch.health", __doc__.splitlines()[0])
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reason = check(os.environ.get(HEALTH_FILE_ENV, ""), args.max_age)
    print(reason or "healthy")
    return 1 if reason else 0


if __name__ == "__main__":
    sys.exit(main())
