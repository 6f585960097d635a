"""An env that lives outside shared/envs/: the proof that adding an env is one module that registers itself.

``--env.module tests.support.plugin_env --env.name corridor`` makes every process of a run import this module,
which registers ``corridor``: E corridors of LENGTH cells, stepped together by numpy. Each episode starts on an
inner cell and draws which end is the goal; the observation shows the position (one-hot) and the goal's side
(one-hot), actions are 0 left and 1 right. Reaching the goal ends the episode with reward +1; every other step
costs ``--env.corridor.step-cost`` (an option of the plug-in's own, saved in config.json like a built-in's); an
episode is truncated after MAX_STEPS steps. Score: the episode's return, negative when the goal is reached late or
not at all; success: the goal reached by the shortest path, which a policy that does not read the goal's side
reaches only about half the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.envs import EnvEntry, options, register
from shared.errors import check
from shared.spec import EnvSpec, checked_actions

LENGTH = 6
MAX_STEPS = 30
SPEC = EnvSpec(obs_shape=(LENGTH + 2,), obs_dtype="float32", stack=1, num_actions=2)


@dataclass
class CorridorOptions:
    """The corridor (``--env.corridor.*``)."""

    step_cost: float = 0.05
    """Reward of every step that does not reach the goal, negated."""

    def validate(self) -> None:
        check(0.0 <= self.step_cost <= 1.0, "env.corridor.step_cost", self.step_cost, "must be in [0, 1]")


class CorridorVectorEnv:
    """``num_envs`` corridors under the vector-env contract of shared/spec.py (same-step auto-reset)."""

    spec = SPEC

    def __init__(self, num_envs: int, seed: int, step_cost: float = 0.05) -> None:
        self.num_envs = int(num_envs)
        self._cost = float(step_cost)
        self._rng = np.random.default_rng(seed)
        n = self.num_envs
        self._pos, self._goal = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self._t, self._shortest = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self._return = np.zeros(n, np.float64)
        self._started = False

    def _new_episodes(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self._goal[which] = self._rng.integers(0, 2, k) * (LENGTH - 1)  # cell 0 or cell LENGTH - 1
        self._pos[which] = self._rng.integers(1, LENGTH - 1, k)
        self._shortest[which] = np.abs(self._goal[which] - self._pos[which])
        self._t[which] = 0
        self._return[which] = 0.0

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, LENGTH + 2), np.float32)
        rows = np.arange(self.num_envs)
        obs[rows, self._pos] = 1.0
        obs[rows, LENGTH + (self._goal > 0)] = 1.0
        return obs

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._new_episodes(np.ones(self.num_envs, bool))
        self._started = True
        return self._obs()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = checked_actions(self._started, actions, self.num_envs)
        self._pos = np.clip(self._pos + np.where(a == 1, 1, -1), 0, LENGTH - 1)
        self._t += 1
        terminated = self._pos == self._goal
        truncated = ~terminated & (self._t >= MAX_STEPS)
        reward = np.where(terminated, 1.0, -self._cost).astype(np.float32)
        self._return += reward
        success = terminated & (self._t == self._shortest)
        info = {"score": self._return.copy(), "success": success}
        self._new_episodes(terminated | truncated)
        return self._obs(), reward, terminated, truncated, info

    def action_mask(self) -> np.ndarray:
        return np.ones((self.num_envs, 2), bool)

    def close(self) -> None:
        pass


def _make(cfg: Any, seeds: Sequence[int]) -> CorridorVectorEnv:
    return CorridorVectorEnv(len(seeds), seeds[0], options(cfg, "corridor", CorridorOptions).step_cost)


ENTRY = register(
    EnvEntry(
        "corridor",
        spec=lambda cfg: SPEC,
        make=_make,
        action_names=lambda cfg: ["left", "right"],
        options_type=CorridorOptions,
        gamma=0.95,  # its own discount: a goal 5 cells away is still worth 0.77
        max_episode_steps=0,  # it truncates its own episodes at MAX_STEPS
        score="Return",
        success="Shortest",
    )
)
