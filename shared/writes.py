"""Writes a full or failing disk may refuse: each refusal is counted by what was being written, the first of a
kind and every hundredth after it are said, and the run goes on (the caller retries at its next occasion)."""

from __future__ import annotations

import collections
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
