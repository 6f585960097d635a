"""Periods in env steps: what the learner does every N transitions inserted, whatever its replay ratio or batch.

Target sync, weight broadcast, in-training evaluation, resets and the n-step schedule are set in env steps, so a change of
``learner.samples_per_insert`` or of the batch changes how much the learner trains between two of them, never where
they fall in the run. An :class:`EnvStepPeriod` fires once each time the run's env-step count crosses a multiple of
its period; it keeps no state a checkpoint needs (a resumed run starts from the count it resumes at).
"""

from __future__ import annotations


class EnvStepPeriod:
    """Fires at the first check at or past each multiple of ``period`` env steps (0: never); ``env_steps`` is the
    count the run starts from, so a resume does not fire for multiples it already passed. With ``budget`` (the run's
    total env steps, 0: none), ``last_part`` env steps before it are quiet: a multiple k * period fires only if
    k * period + last_part <= budget."""

    def __init__(self, period: int, env_steps: int = 0, budget: int = 0, last_part: int = 0):
        if period < 0:
            raise ValueError(f"period {period!r} must be >= 0 (0: never)")
        self.period, self.budget, self.last_part = int(period), int(budget), int(last_part)
        self.mark = env_steps // period if period else 0

    def due(self, env_steps: int) -> bool:
        """Whether a multiple of the period was crossed since the last check that fired."""
        if not self.period:
            return False
        k = env_steps // self.period
        if k <= self.mark:
            return False
        self.mark = k
        return not (self.budget and k * self.period + self.last_part > self.budget)

    def multiples(self, until: int) -> list[int]:
        """The env-step counts at which it fires in a run of ``until`` env steps (for the run header and tests)."""
        if not self.period:
            return []
        return [
            k * self.period
            for k in range(1, until // self.period + 1)
            if not (self.budget and k * self.period + self.last_part > self.budget)
        ]


class NStepSchedule:
    """BBF's n-step schedule in env steps: n starts at ``start`` at each :meth:`restart` (learning starts, a reset)
    and falls exponentially to ``end`` over ``env_steps``, n = round(start * (end / start) ** min(t / env_steps, 1))
    t env steps after it (BBF's exponential_decay_scheduler, counted in env steps rather than gradient steps).
    ``start`` 0 turns it off: n is ``end`` throughout."""

    def __init__(self, start: int, end: int, env_steps: int):
        if start and not (start >= end >= 1 and env_steps >= 1):
            raise ValueError(f"start {start!r} >= end {end!r} >= 1 and env_steps {env_steps!r} >= 1 are needed (start 0: off)")
        self.start, self.end, self.env_steps = int(start), int(end), int(env_steps)
        self.origin: int | None = None  # env steps at the last restart; None: not started yet (n = start)

    def restart(self, env_steps: int) -> None:
        """Begin a cycle at ``env_steps`` (the first update, each reset)."""
        self.origin = int(env_steps)

    def at(self, env_steps: int) -> int:
        """The n of the n-step return at ``env_steps``."""
        if not self.start:
            return self.end
        since = 0 if self.origin is None else max(env_steps - self.origin, 0)
        return round(self.start * (self.end / self.start) ** min(since / self.env_steps, 1.0))
