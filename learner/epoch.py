"""An epoch's figures: what its updates measured, the console's budget phrase, and the epoch rates kept for the ETA."""

from __future__ import annotations

import collections
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from learner.console import format_duration

EPOCH_RATES_KEPT = 10_000  # the latest epochs' updates/s kept for the first-epoch ratio (bounded: runs last days)


@dataclass
class Counters:
    """Run counters; saved in every checkpoint and continued on resume."""

    epoch: int = 0
    updates: int = 0
    weights_version: int = 0
    run: int = 0  # the run's identity on the wire (shared/wire/protocol.py): drawn at its start, kept on resume
    samples_trained: int = 0
    inserted: int = 0  # transitions inserted into replay over the whole run (the env steps of metrics rows)
    wall_seconds: float = 0.0  # training time over the whole run
    elapsed_seconds: float = 0.0  # wall-clock time since the run started, resumes included (until the last checkpoint)


@dataclass
class EpochAccumulator:
    loss: float = 0.0
    td_error: float = 0.0
    q_mean: float = 0.0
    updates: int = 0
    started: float = 0.0
    processed_at_start: int = 0
    starved: float = 0.0  # seconds of loop turns that could not train: waiting for experience (the actors set the pace)
    holding: float = 0.0  # seconds of loop turns that held intake back for the ratio (the learner sets the pace)

    def add(self, stats) -> None:
        self.loss += stats.loss
        self.td_error += stats.td_error
        self.q_mean += stats.q_mean
        self.updates += 1


@dataclass
class EpochClock:
    """Updates/s of this start's epochs (the first apart: it pays for warm-up) and the origin of its budget ETA."""

    first_rate: float | None = None
    rates: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=EPOCH_RATES_KEPT))
    eta_origin: tuple[float, int] | None = None  # (monotonic time, env steps) at this start's first epoch

    def record(self, updates_per_s: float) -> None:
        if self.first_rate is None:
            self.first_rate = updates_per_s
        else:
            self.rates.append(updates_per_s)

    def first_epoch_ratio(self) -> float | None:
        """First epoch's updates/s over the mean of the later epochs (None before two epochs)."""
        if self.first_rate is None or not self.rates:
            return None
        return self.first_rate / statistics.mean(self.rates)

    def budget_phrase(self, total: int, done: int) -> str:
        """``, Budget: N of M env steps, ETA 1h02m`` at this start's env-step rate (empty without a budget)."""
        if not total:
            return ""
        now = time.monotonic()
        if self.eta_origin is None:
            self.eta_origin = (now, done)
        since, at = self.eta_origin
        rate = (done - at) / (now - since) if now > since and done > at else 0.0
        eta = format_duration(max(total - done, 0) / rate) if rate > 0 else "-"
        return f", Budget: {done:,} of {total:,} env steps, ETA {eta}"


def epoch_figures(acc: EpochAccumulator, seconds: float, c: Counters, plane: Any, dqn: Any, resets: int) -> dict[str, float]:
    """The metrics row of an epoch: the learner's averages and rates, the actors' episodes, replay's state."""
    held = plane.consolidator.slots.held()  # a slot whose lease lapsed leaves the figures: its actor is gone
    live = [t for t, h in zip(plane.consolidator.tracks, held) if t.stats and h]
    lags = [c.weights_version - t.weights_version for t in live if t.run == c.run]
    stats = plane.stats()
    window = np.asarray(plane.episodes, dtype=np.float64).reshape(-1, 4)  # return, score, success, start: true starts
    started = np.asarray(plane.started, dtype=np.float64).reshape(-1, 4)  # those from saved states
    hazard, frontier = (int(n) for n in plane.start_counts[1:])
    return {
        **{f"learner/{name}": getattr(acc, name) / acc.updates for name in ("loss", "td_error", "q_mean")},
        "learner/updates_per_s": acc.updates / seconds,
        "learner/samples_per_s": acc.updates * dqn.effective_batch / seconds,
        "learner/replay_ratio": c.samples_trained / max(c.inserted, 1),
        "learner/lr": dqn.optimizer.param_groups[0]["lr"],
        "learner/weights_version": c.weights_version,
        "actor/other_run": sum(t.run != c.run for t in live),
        "learner/resets": resets,
        "actor/experiences_per_s": (stats.processed - acc.processed_at_start) / seconds,
        "learner/starved_share": min(acc.starved / seconds, 1.0),
        "learner/holding_share": min(acc.holding / seconds, 1.0),
        "learner/updates": c.updates,
        "actor/return": float(window[:, 0].mean()) if len(window) else 0.0,
        "actor/score": float(window[:, 1].mean()) if len(window) else 0.0,
        "actor/success_rate": float(window[:, 2].mean()) if len(window) else 0.0,
        "actor/episodes": plane.episodes_total,
        "actor/starts_hazard": hazard,  # episodes begun at a saved state before a hazard, so far
        "actor/starts_frontier": frontier,  # ... and at the frontier
        "actor/started_score": float(started[:, 1].mean()) if len(started) else 0.0,
        "actor/started_success_rate": float(started[:, 2].mean()) if len(started) else 0.0,
        "actor/successes": plane.successes_total,
        "actor/epsilon": statistics.mean(t.stats["epsilon"] for t in live) if live else 1.0,
        "actor/weights_lag_max": max(lags) if lags else 0.0,
        "learner/rss_mb": psutil.Process().memory_info().rss / 2**20,  # this process: replay, nets, queue
        "replay/size": stats.buffer,
        "replay/live_streams": plane.replay.live_streams(),
        "replay/drops": stats.drops,
        "replay/rejected": stats.rejected,
        "replay/lost_in_flight": stats.lost_in_flight,
        **priority_figures(plane.replay),
    }


def priority_figures(replay: Any) -> dict[str, float]:
    """Prioritized replay's priority distribution and IS-weight range (empty for uniform replay)."""
    if not hasattr(replay, "priority_stats"):
        return {}
    s = replay.priority_stats()
    return {
        "replay/priority_mean": s["priority_mean"],
        "replay/priority_max": s["priority_max"],
        "replay/is_weight_min": s["weight_min"],
        "replay/is_weight_max": 1.0,
        "replay/is_beta": replay.beta,
        "replay/uniform_draws": replay.uniform_draws,  # draws past the rejection rounds, since the start
    }
