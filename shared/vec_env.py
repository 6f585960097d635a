"""Every env of a run as a :class:`~shared.spec.VectorEnv` with its :class:`~shared.spec.EnvSpec`.

:func:`env_spec` gives the spec of any :class:`~shared.config.EnvConfig` without starting an
env: Mario, Catch and the fake env observe ``(frame_size, frame_size)`` uint8 frames stacked
``env.stack`` deep, unmasked; Snake and fuel breaks declare their own (stack 1; fuel breaks are
masked, one action per cell). :func:`make_vector_env` builds the E envs of one actor in the
calling process (never pickled): Snake and fuel breaks are vector envs themselves (one numpy call
steps all E); the frame envs are wrapped in :class:`FrameVectorEnv`, which steps its single envs
one after the other and follows the same contract.

:class:`FrameVectorEnv` keeps the frame envs' exactness: each returned frame is copied into a
fresh ``[E, H, W]`` array (nes-py renders every frame into one reused buffer), an env that ends
is reset at once and its row is the reset frame (same-step auto-reset), and its calls to the
single envs are exactly those the collector made before vector envs (``step`` per tick, ``reset``
after an episode's end). ``info["score"]`` is the episode's max ``x_pos`` so far (Mario's
distance; Catch's paddle column; the fake env's 3 * step), ``info["success"]`` its ``flag_get``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shared.config import ConfigError, EnvConfig
from shared.protocol import action_dtype
from shared.spec import EnvSpec, VectorEnv, checked_actions

__all__ = ["FrameVectorEnv", "env_spec", "make_vector_env", "action_dtype"]


def _snake_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    return dict(size=cfg.snake_size, obs=cfg.snake_obs, max_steps=cfg.max_episode_steps,
                hunger=cfg.snake_hunger or None, flood=cfg.snake_flood)


def _fuelbreak_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    return dict(size=cfg.fuelbreak_size, budget=cfg.fuelbreak_budget, ignitions=cfg.fuelbreak_ignitions)


def env_spec(cfg: EnvConfig) -> EnvSpec:
    """The observation and action space of the env ``cfg`` describes (ConfigError names a bad value)."""
    cfg.validate()
    if cfg.name == "snake":
        from shared.snake import SnakeVectorEnv
        return SnakeVectorEnv(1, **_snake_kwargs(cfg)).spec
    if cfg.name == "fuelbreak":
        from shared.fuelbreak import FuelBreakVectorEnv
        return FuelBreakVectorEnv(1, **_fuelbreak_kwargs(cfg)).spec
    from shared.env import num_actions_for
    return EnvSpec(obs_shape=(cfg.frame_size, cfg.frame_size), obs_dtype="uint8", stack=cfg.stack,
                   num_actions=num_actions_for(cfg), masked=False)


def make_vector_env(cfg: EnvConfig, seeds: Sequence[int]) -> VectorEnv:
    """The ``len(seeds)`` envs of one actor, built here. Frame envs: env e is seeded with ``seeds[e]``;
    Snake and fuel breaks take ``seeds[0]`` and derive each env's stream from it and its index."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("make_vector_env needs at least one seed (one per env)")
    cfg.validate()
    if cfg.name == "snake":
        from shared.snake import SnakeVectorEnv
        return SnakeVectorEnv(len(seeds), seed=seeds[0], **_snake_kwargs(cfg))
    if cfg.name == "fuelbreak":
        from shared.fuelbreak import FuelBreakVectorEnv
        return FuelBreakVectorEnv(len(seeds), seed=seeds[0], **_fuelbreak_kwargs(cfg))
    from shared.env import make_env
    return FrameVectorEnv([make_env(cfg, seed=s) for s in seeds], env_spec(cfg))


class FrameVectorEnv:
    """Single frame envs (shared/env.py ``FrameEnv``) stepped side by side under the vector-env contract."""

    def __init__(self, envs: list, spec: EnvSpec):
        if not envs:
            raise ConfigError("FrameVectorEnv needs at least one env")
        self.envs, self.spec, self.num_envs = list(envs), spec, len(envs)
        self._shape = tuple(spec.obs_shape)
        self._score = np.zeros(self.num_envs, np.float64)  # max x_pos of each env's episode so far
        self._flag = np.zeros(self.num_envs, bool)
        self._mask = np.ones((self.num_envs, spec.num_actions), bool)
        self._started = False

    @property
    def inner(self) -> list:
        return self.envs

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs = np.empty((self.num_envs, *self._shape), np.uint8)
        for e, env in enumerate(self.envs):
            obs[e] = env.reset(None if seed is None else seed + e)
        self._score[:] = 0
        self._flag[:] = False
        self._started = True
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = checked_actions(self._started, actions, self.num_envs)
        n = self.num_envs
        obs = np.empty((n, *self._shape), np.uint8)
        reward = np.empty(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        score = np.empty(n, np.float64)
        success = np.empty(n, bool)
        for e, (env, action) in enumerate(zip(self.envs, a.tolist())):
            frame, r, term, trunc, info = env.step(action)
            reward[e] = r
            x = info["x_pos"]
            if x > self._score[e]:
                self._score[e] = x
            self._flag[e] |= bool(info["flag_get"])
            score[e], success[e] = self._score[e], self._flag[e]
            if term or trunc:
                terminated[e], truncated[e] = term, trunc
                obs[e] = env.reset()
                self._score[e], self._flag[e] = 0.0, False
            else:
                obs[e] = frame  # a copy: nes-py reuses its screen buffer
        return obs, reward, terminated, truncated, {"score": score, "success": success}

    def action_mask(self) -> np.ndarray:
        return self._mask.copy()

    def close(self) -> None:
        for env in self.envs:
            env.close()
