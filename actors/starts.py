"""Training starts: where each env's next training episode begins (docs/starts.md).

An actor keeps states of its own recent play (an env that can save them: ``EnvEntry.states``). When an episode ends a
share ``actor.start_share`` of the next episodes start from one of them instead of the true start:

- **hazard**: the state ``actor.start_lead`` steps before a recent episode's end, in the end's cluster (the env's named
  hazards, else 128-wide score bins). A cluster is drawn with P = (1 - rho) * P_death + rho * P_stale (Prioritized
  Level Replay's mix, rho 0.3): P_death proportional to its recent death rate (ends there over episodes that reached
  it, the last ``WINDOW`` episodes), P_stale to the starts since it was last drawn. Half of these starts carry one
  forced random press at a random step of the lead (the evaluation's noise, practised where it decides).
- **frontier** (``actor.frontier_share`` of the saved-state starts): the state ``start_lead`` steps before the furthest
  score recent episodes reached, followed by ``actor.frontier_burst`` random steps (Go-Explore's return, then explore).

The learner is unchanged: replay sees ordinary episodes. Each finished episode says where it started (the wire's
``start`` column), so the learner reports the true-start score apart from the rest.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import numpy as np

TRUE, HAZARD, FRONTIER = 0, 1, 2
START_KINDS = ("true", "hazard", "frontier")
"""The wire's ``start`` column: where an episode started."""

WINDOW = 256  # recent episode ends the death rates are taken over
KEEP = 2  # states kept per cluster and at the frontier (16 parked emulators per Mario env hold 6 hazards' and the frontier's)
REUSE = 32  # starts from a kept state before a newer one may replace it: a state's first start parks an emulator there
# (Mario: the prefix replayed, ~1.3 ms a frame here), the next ones reset it (0.1 ms)
STALENESS = 0.3  # rho: the staleness share of a cluster's draw (PLR's mix)
BIN = 128.0  # score width of a cluster on envs without named hazards


@dataclass
class Saved:
    """A state of the actor's own play and the score reached there. An episode begun at it stacks its first frame, as
    one begun at the true start does (and as replay rebuilds it from the ``first`` flag)."""

    state: Any
    score: float
    uses: int = 0  # starts begun from it


class StartChooser:
    """Saves states of E envs' play every ``every`` steps, learns where episodes end, and picks each next start."""

    def __init__(
        self,
        num_envs: int,
        rng: np.random.Generator,
        share: float,
        lead: int,
        frontier_share: float,
        burst: int,
        hazards: list[tuple[str, float, float]] | None = None,
        every: int = 4,
    ) -> None:
        self.rng, self.share, self.lead, self.frontier_share, self.burst = rng, share, lead, frontier_share, burst
        self.every = max(1, min(every, lead))
        self.edges = np.array([lo for _, lo, _ in hazards], np.float64) if hazards else None  # cluster k: [edge_k, edge_k+1)
        depth = lead // self.every + 2
        self.recent: list[collections.deque[Saved]] = [collections.deque(maxlen=depth) for _ in range(num_envs)]
        self.before_best: list[Saved | None] = [None] * num_envs  # the state `lead` steps before this episode's furthest
        self.best = np.full(num_envs, -np.inf)  # this episode's furthest score
        self.steps = np.zeros(num_envs, np.int64)  # steps into this episode
        self.kind = np.zeros(num_envs, np.int64)  # where this episode started
        self.start_score = np.zeros(num_envs)  # the score it started at
        self.force_at = np.full(num_envs, -1)  # the step of its forced random press (-1: none)
        self.burst_left = np.zeros(num_envs, np.int64)  # random steps still to take
        self._next: list[tuple[int, Saved | None, int]] = [(TRUE, None, -1)] * num_envs  # chosen at the reset, used after
        self.ends: collections.deque[tuple[float, float, bool]] = collections.deque(maxlen=WINDOW)  # (start, end, success)
        self.pools: dict[int, list[Saved]] = {}  # cluster -> states before its recent ends
        self.frontier: list[Saved] = []  # the furthest states, best first
        self.drawn_at: dict[int, int] = {}  # cluster -> the start count when it was last drawn
        self.starts = 0
        self.counts = np.zeros(len(START_KINDS), np.int64)  # starts of each kind so far

    # -- the collector calls these ------------------------------------------------------------------------------------

    def epsilon(self, eps: np.ndarray) -> np.ndarray:
        """Each env's epsilon this step: 1 during a frontier burst and at a forced press, else ``eps``."""
        forced = (self.burst_left > 0) | (self.force_at == self.steps)
        return np.where(forced, 1.0, eps) if forced.any() else eps

    def stepped(self, env: Any, score: np.ndarray, live: np.ndarray) -> None:
        """After a step: count it, and save the state of the ``live`` envs (not just reset) every ``every`` steps."""
        self.steps[live] += 1  # an env just reset is at its episode's step 0
        self.burst_left[live & (self.burst_left > 0)] -= 1
        for e in np.flatnonzero(live & (self.steps % self.every == 0)).tolist():
            recent = self.recent[e]
            recent.append(Saved(env.save_state(e), float(score[e])))
            if score[e] > self.best[e]:  # a new furthest: keep the state `lead` steps back
                self.before_best[e], self.best[e] = self._back(recent), score[e]

    def choose(self, e: int) -> Any:
        """The state env ``e``'s next episode starts at (None: the true start); the vector env calls this at its reset."""
        kind, saved, force = TRUE, None, -1
        if self.share > 0 and self.rng.random() < self.share:
            if self.frontier and self.rng.random() < self.frontier_share:
                kind, saved = FRONTIER, self.frontier[int(self.rng.integers(len(self.frontier)))]
            elif (cluster := self._draw_cluster()) is not None:
                pool = self.pools[cluster]
                kind, saved = HAZARD, pool[int(self.rng.integers(len(pool)))]
                if self.rng.random() < 0.5:
                    force = int(self.rng.integers(self.lead))
        if saved is not None:
            saved.uses += 1
        self._next[e] = (kind, saved, force)
        return None if saved is None else saved.state

    def ended(self, ended: np.ndarray, score: np.ndarray, success: np.ndarray) -> np.ndarray:
        """Envs ``ended`` finished (``score``, ``success`` theirs): learn from them, begin the episodes ``choose`` picked
        and return where the finished ones had started (``START_KINDS`` index)."""
        kinds = self.kind[ended].copy()
        for i, e in enumerate(ended.tolist()):
            self._learn(e, float(score[i]), bool(success[i]))
            kind, saved, force = self._next[e]
            self.kind[e], self.force_at[e], self.steps[e] = kind, force, 0
            self.burst_left[e] = self.burst if kind == FRONTIER else 0
            self.start_score[e] = saved.score if saved is not None else 0.0
            self.best[e], self.before_best[e] = (saved.score if saved is not None else -np.inf), None
            self.recent[e].clear()
            self.counts[kind] += 1
        return kinds

    # -- where episodes end ---------------------------------------------------------------------------------------------

    def cluster(self, score: float) -> int:
        """The cluster of an end at ``score``: the last named hazard starting at or before it, else its 128-wide bin."""
        if self.edges is not None:
            return max(int(np.searchsorted(self.edges, score, side="right")) - 1, 0)
        return int(score // BIN)

    def death_rates(self) -> dict[int, float]:
        """Each cluster's recent death rate: failed episodes that ended in it over episodes that reached it."""
        if not self.ends:
            return {}
        start, end, success = np.array(self.ends, np.float64).T
        rates = {}
        for k in self.pools:
            lo, hi = self.bounds(k)
            reached = (end >= lo) & (start < hi)  # got to the cluster (or started inside it)
            died = reached & (success == 0) & (end < hi)
            rates[k] = float(died.sum() / max(reached.sum(), 1))
        return rates

    def bounds(self, k: int) -> tuple[float, float]:
        """Cluster ``k``'s score range [lo, hi)."""
        if self.edges is None:
            return k * BIN, (k + 1) * BIN
        return float(self.edges[k]), float(self.edges[k + 1]) if k + 1 < len(self.edges) else np.inf

    def weights(self) -> tuple[list[int], np.ndarray]:
        """The clusters with states and the chance of drawing each: (1 - rho) * P_death + rho * P_stale."""
        clusters = sorted(k for k, pool in self.pools.items() if pool)
        if not clusters:
            return [], np.zeros(0)
        rates = self.death_rates()
        death = np.array([rates.get(k, 0.0) for k in clusters]) + 1e-3  # a cluster nobody dies in now is still drawn rarely
        stale = np.array([self.starts - self.drawn_at.get(k, -1) for k in clusters], np.float64)
        stale_p = stale / stale.sum() if stale.sum() > 0 else np.full(len(clusters), 1 / len(clusters))
        p = (1 - STALENESS) * death / death.sum() + STALENESS * stale_p
        return clusters, p / p.sum()

    def _draw_cluster(self) -> int | None:
        clusters, p = self.weights()
        if not clusters:
            return None
        k = clusters[int(self.rng.choice(len(clusters), p=p))]
        self.starts += 1
        self.drawn_at[k] = self.starts
        return k

    @staticmethod
    def _keep(pool: list[Saved], saved: Saved) -> None:
        """Add ``saved`` to ``pool`` while it has room, else in place of its most used state once that one has been used
        REUSE times (a parked state serves several starts before the newest death replaces it)."""
        if len(pool) < KEEP:
            pool.append(saved)
            return
        worn = max(range(len(pool)), key=lambda i: pool[i].uses)
        if pool[worn].uses >= REUSE:
            pool[worn] = saved

    def _back(self, recent: collections.deque[Saved]) -> Saved:
        """The saved state about ``lead`` steps before the newest (the oldest kept, early in an episode)."""
        return recent[max(len(recent) - 1 - -(-self.lead // self.every), 0)]

    def _learn(self, e: int, score: float, success: bool) -> None:
        recent = self.recent[e]
        self.ends.append((float(self.start_score[e]), score, success))
        if not success and recent:  # the state `lead` steps before this end goes into its cluster's pool
            self._keep(self.pools.setdefault(self.cluster(score), []), self._back(recent))
        best = self.before_best[e]
        if best is not None and (len(self.frontier) < KEEP or best.score > self.frontier[-1].score):
            self.frontier = sorted([*self.frontier, best], key=lambda s: -s.score)[:KEEP]
