"""How files are written: whole or not at all (``write_atomic``), and what a full or failing disk refused, counted by
what was being written, the first of a kind and every hundredth after it said, while the run goes on."""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

SAY_EVERY = 100  # a kind of write refused again and again is said once per this many refusals


class RefusedWrites:
    """``attempt(what, fn, *args)`` runs a write; an OSError (or the RuntimeError torch.save raises for one) is counted
    under ``what``, said through ``echo``, and returned as False instead of raised."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.counts: collections.Counter[str] = collections.Counter()

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            fn(*args)
        except (OSError, RuntimeError) as exc:
            self.counts[what] += 1
            n = self.counts[what]
            if n == 1 or n % SAY_EVERY == 0:
                self.echo(f"[MAIN] {what} not written ({type(exc).__name__}: {exc}; {n} refused so far); the run goes on")
            return False
        return True


def write_atomic(path: str, text: str, tmp: str = "") -> None:
    """``text`` into ``path``: written whole to ``tmp`` (default: ``path`` + .tmp), then renamed into place."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
