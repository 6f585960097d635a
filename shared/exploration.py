"""Exploration: each env's epsilon, annealed from 1.0 down to its own floor.

Contract. The envs of a run are numbered ``i = actor_id * envs_per_actor + e`` over all
``N = actors * envs_per_actor`` envs. Env i explores with

    floor_i = max(eps_min, eps_base ** (1 + eps_alpha * i / (N - 1)))      (Ape-X, floored)
    eps_i(t) = floor_i + (1 - floor_i) * max(0, 1 - t / eps_anneal_steps)

where ``t`` counts the steps that env has taken (this actor incarnation's own count, so a
restarted actor anneals again from 1.0). ``actor.epsilon >= 0`` replaces the whole schedule by
that fixed value.

Why: Ape-X's spread was made for hundreds of actors; with 4 envs it gives 0.40, 0.047, 0.0056
and 0.00066 from the first step, on a deterministic game with no random starts, so three of
four envs replay nearly the same trajectory of an untrained network. Annealing from 1.0 fills
replay with varied play first; the floor keeps every env's trajectory varied later.

Temporally extended exploration (:class:`ExplorationHolds`, ez-greedy of Dabney, Ostrovski and
Barreto 2021, "Temporally-Extended epsilon-Greedy Exploration"). An env that is not holding an
exploratory action starts one with probability eps_i(t): a uniformly random action held for
``n = min(Zipf(explore_repeat), explore_repeat_max)`` steps (its first step included); while it
holds, its epsilon is not drawn again. ``explore_repeat = 0`` gives n = 1, plain epsilon-greedy.
Why: on Mario a jump is a button held over several agent steps; single random presses make
hops, so plain epsilon-greedy almost never finds the held jump that clears a pit the greedy
policy runs into (Q-values printed along such episodes differed by ~0.1 between jumping and
not, a step before the edge).
"""

from __future__ import annotations

import numpy as np

from shared.config import ActorConfig, ConfigError


def _require_resolved(name: str, value: int, lowest: int) -> None:
    """An ActorConfig's auto fields (-1 envs per actor, -1 anneal steps) mean nothing until a RunConfig
    resolves them for its env; used raw they would play no envs or skip the anneal without a word."""
    if value < lowest:
        raise ConfigError(f"actor.{name}={value!r} is auto: build the ActorConfig inside a RunConfig, which "
                          "resolves it for its env (or set it)")


def epsilon_floors(cfg: ActorConfig, num_actors: int, actor_id: int) -> np.ndarray:
    """The floor of each env of actor ``actor_id`` (float64 [envs_per_actor])."""
    _require_resolved("envs_per_actor", cfg.envs_per_actor, 1)
    per = cfg.envs_per_actor
    total = num_actors * per
    index = actor_id * per + np.arange(per)
    if total == 1:
        apex = np.full(per, cfg.eps_base)
    else:
        apex = cfg.eps_base ** (1.0 + cfg.eps_alpha * index / (total - 1))
    return np.maximum(apex, cfg.eps_min)


def epsilons(cfg: ActorConfig, num_actors: int, actor_id: int, env_steps: int) -> np.ndarray:
    """Each env's epsilon after ``env_steps`` steps of that env (float64 [envs_per_actor])."""
    _require_resolved("envs_per_actor", cfg.envs_per_actor, 1)
    if cfg.epsilon >= 0:
        return np.full(cfg.envs_per_actor, cfg.epsilon)
    floors = epsilon_floors(cfg, num_actors, actor_id)
    _require_resolved("eps_anneal_steps", cfg.eps_anneal_steps, 0)
    if cfg.eps_anneal_steps <= 0:
        return floors
    left = max(0.0, 1.0 - env_steps / cfg.eps_anneal_steps)
    return floors + (1.0 - floors) * left


def mean_floor(cfg: ActorConfig, num_actors: int) -> float:
    """The mean epsilon over all envs once annealing is over (or the fixed epsilon)."""
    if cfg.epsilon >= 0:
        return cfg.epsilon
    return float(np.mean(np.concatenate([epsilon_floors(cfg, num_actors, a) for a in range(num_actors)])))


class ExplorationHolds:
    """Per-env state of ez-greedy: which envs hold which random action for how many more steps."""

    def __init__(self, cfg: ActorConfig, num_envs: int, num_actions: int, rng: np.random.Generator):
        self.mu, self.cap, self.num_actions, self.rng = cfg.explore_repeat, cfg.explore_repeat_max, num_actions, rng
        self.left = np.zeros(num_envs, np.int64)      # steps still to play of the held action (0: none held)
        self.action = np.zeros(num_envs, np.int64)    # the held action

    def step(self, epsilon: np.ndarray) -> np.ndarray:
        """Advance one step; returns the bool mask [E] of envs that play ``self.action`` this step."""
        start = (self.left == 0) & (self.rng.random(len(self.left)) < epsilon)
        n_start = int(start.sum())
        if n_start:
            self.action[start] = self.rng.integers(self.num_actions, size=n_start)
            self.left[start] = (np.minimum(self.rng.zipf(self.mu, size=n_start), self.cap)
                                if self.mu > 0 else 1)
        exploring = self.left > 0
        self.left[exploring] -= 1
        return exploring

    def clear(self, env: int) -> None:
        """Drop env ``env``'s hold (its episode ended)."""
        self.left[env] = 0
