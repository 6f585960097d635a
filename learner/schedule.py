"""Periods in env steps: what the learner does every N transitions inserted, whatever its replay ratio or batch.

Target sync, weight broadcast, in-training evaluation and resets are set in env steps, so the replay ratio and the batch
change how much the learner trains between two of them, never where they fall; a checkpoint needs no state from here.
"""

from __future__ import annotations

import math

from shared.config import LearnerConfig


class EnvStepPeriod:
    """Fires at the first check at or past each multiple of ``period`` env steps (0: never) after ``env_steps``, the
    count the run starts from; with ``budget`` (0: none), k * period fires only if k * period + last_part <= budget."""

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
        return self._fits(k)

    def multiples(self, until: int) -> list[int]:
        """The env-step counts at which it fires in a run of ``until`` env steps (for the run header and tests)."""
        if not self.period:
            return []
        return [k * self.period for k in range(1, until // self.period + 1) if self._fits(k)]

    def _fits(self, k: int) -> bool:
        return not (self.budget and k * self.period + self.last_part > self.budget)


class ReplayRatio:
    """At most ``samples_per_insert`` samples trained per transition inserted (0: no limit); with ``holds_ratio``, intake
    is also held back while training trails by more than ``ratio_slack`` transitions, so the actors wait instead."""

    def __init__(self, cfg: LearnerConfig, batch: int, train: bool):
        self.cfg, self.batch, self.train = cfg, batch, train

    def allows(self, samples_trained: int, inserted: int) -> bool:
        """Whether one more update of ``batch`` samples stays within the ratio."""
        spi = self.cfg.samples_per_insert
        return spi <= 0 or samples_trained + self.batch <= spi * inserted

    def room(self, samples_trained: int, inserted: int, replay_ready: bool) -> int:
        """Transitions replay may take in now (holding the ratio): at most 0 only while the cap allows the next update and
        replay is ready to sample, so holding never stalls the loop; the drain overshoots by less than one batch."""
        cfg = self.cfg
        if not (self.train and cfg.holds_ratio and replay_ready):
            return 1 << 62
        return math.ceil(cfg.ratio_slack + (samples_trained + self.batch) / cfg.samples_per_insert - inserted)
