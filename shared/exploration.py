"""Exploration: each env's epsilon, annealed from 1.0 down to its own floor, and the epsilon-greedy choice itself.

Env ``i = actor_id * envs_per_actor + e`` of the run's N = actors x envs_per_actor explores with (``t``: the env's own
steps, or its share of the run's, actors/collector.py's clock; ``actor.epsilon >= 0``: fixed)

    floor_i = max(eps_min, eps_base ** (1 + eps_alpha * i / (N - 1)))      (Ape-X, floored)
    eps_i(t) = floor_i + (1 - floor_i) * max(0, 1 - t / (eps_anneal_env_steps / N))

so the anneal spans eps_anneal_env_steps of the run's transitions however many envs share them.

Ape-X's spread was made for hundreds of actors: with 4 envs three would replay nearly one greedy trajectory of an
untrained network. Annealing from 1.0 fills replay with varied play first; the floor keeps it varied later.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shared.config import ActorConfig, ConfigError


def _require_resolved(name: str, value: int, lowest: int) -> None:
    """An ActorConfig's auto (-1) fields mean nothing until a RunConfig resolves them: refuse them, not play no envs."""
    if value < lowest:
        raise ConfigError(
            f"actor.{name}={value!r} is auto: build the ActorConfig inside a RunConfig, which resolves it for its env (or set it)"
        )


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


def anneal_steps_per_env(cfg: ActorConfig, num_actors: int) -> float:
    """Steps of each env over which its epsilon falls to its floor: the run's ``eps_anneal_env_steps`` split evenly over
    its ``num_actors`` x ``envs_per_actor`` envs (0: none)."""
    _require_resolved("envs_per_actor", cfg.envs_per_actor, 1)
    _require_resolved("eps_anneal_env_steps", cfg.eps_anneal_env_steps, 0)
    return cfg.eps_anneal_env_steps / (num_actors * cfg.envs_per_actor)  # exact where it divides: 100,000 / 4 = 25,000.0


def epsilons(cfg: ActorConfig, num_actors: int, actor_id: int, env_steps: int) -> np.ndarray:
    """Each env's epsilon after ``env_steps`` steps of that env (float64 [envs_per_actor])."""
    _require_resolved("envs_per_actor", cfg.envs_per_actor, 1)
    if cfg.epsilon >= 0:
        return np.full(cfg.envs_per_actor, cfg.epsilon)
    floors = epsilon_floors(cfg, num_actors, actor_id)
    per_env = anneal_steps_per_env(cfg, num_actors)
    if per_env <= 0:
        return floors
    left = max(0.0, 1.0 - env_steps / per_env)
    return floors + (1.0 - floors) * left


def mean_floor(cfg: ActorConfig, num_actors: int) -> float:
    """The mean epsilon over all envs once annealing is over (or the fixed epsilon)."""
    if cfg.epsilon >= 0:
        return cfg.epsilon
    return float(np.mean(np.concatenate([epsilon_floors(cfg, num_actors, a) for a in range(num_actors)])))


class EpsilonGreedy:
    """The one epsilon-greedy (masked) choice: collectors, evaluations and drills all act through it. Each env explores
    with its own epsilon (a uniform valid action), else takes the argmax of its Q over the valid actions."""

    def __init__(self, rng: np.random.Generator, num_actions: int):
        self.rng, self.num_actions = rng, num_actions

    def choose(
        self, epsilon: np.ndarray, q_of: Callable[[], np.ndarray], mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions [E] and the Q [E, A] they were chosen with (None: every env explored); ``q_of()`` is called only when
        an env exploits. No exploration draw at epsilon 0 or 1 everywhere (pure greedy, pure random)."""
        rng, n = self.rng, len(epsilon)
        if (epsilon >= 1.0).all() or not epsilon.any():
            explore = np.full(n, bool(epsilon[0] >= 1.0))
        else:
            explore = rng.random(n) < epsilon
        rows = np.flatnonzero(explore)
        actions = np.zeros(n, np.int64)
        if len(rows):
            actions[rows] = rng.integers(self.num_actions, size=len(rows))
            if mask is not None:  # a random valid action instead (the draw above keeps the stream as runs drew it)
                actions[rows] = np.where(mask[rows], rng.random((len(rows), self.num_actions)), -1.0).argmax(1)
        if len(rows) == n:
            return actions, None
        q = q_of()
        greedy = (q if mask is None else np.where(mask, q, -np.inf)).argmax(axis=1)
        return np.where(explore, actions, greedy), q
