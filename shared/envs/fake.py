"""A fast synthetic frame env for plumbing tests (registered as ``fake``): no emulator, exact frames.

Score: 3 * the step in the episode; success: about 1 in 4 terminations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.envs import check_env, frame_entry, options, register
from shared.errors import check_range
from shared.spec import checked_action

if TYPE_CHECKING:
    from shared.config import EnvConfig

FAKE_EPISODE_RANGE = (8, 256)
"""FakeEnv episode lengths (agent steps until termination) are drawn uniformly from [lo, hi]."""


@dataclass
class FakeOptions:
    """The fake env (``--env.fake.*``)."""

    actions: int = 7
    """Number of actions (7: as many as Mario's simple button set)."""

    def validate(self) -> None:
        check_range(self, "env.fake.actions", 1, 256, "must be an integer in [1, 256]")


class FakeEnv:
    """A frame's first 16 bytes: little-endian uint64 frame count since seeding and seed, then a seed-derived pattern shifted
    by the count (unique per seed, episode, step). Reward: 1.0 when the action is ``count % num_actions``, else -0.1."""

    def __init__(self, cfg: EnvConfig, seed: int) -> None:
        _, cfg = check_env(cfg)
        self.num_actions = options(cfg, "fake", FakeOptions).actions
        self.frame_shape = (cfg.frame_size, cfg.frame_size)
        self._n = cfg.frame_size * cfg.frame_size
        self._limit = cfg.max_episode_steps
        self._seed_all(seed)
        self._needs_reset = True

    def _seed_all(self, seed: int) -> None:
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed & 0xFFFF_FFFF_FFFF_FFFF)
        self._pattern = self._rng.integers(0, 256, self._n + 256, dtype=np.uint8)
        self._count = 0

    def _frame(self) -> np.ndarray:
        frame = np.empty(self.frame_shape, np.uint8)
        flat = frame.reshape(-1)
        off = self._count % 256
        flat[16:] = self._pattern[off : off + self._n - 16]
        flat[:16].view("<u8")[:] = (self._count, self._seed & 0xFFFF_FFFF_FFFF_FFFF)
        self._good = self._count % self.num_actions
        self._count += 1
        return frame

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._seed_all(seed)
        lo, hi = FAKE_EPISODE_RANGE
        self._length = int(self._rng.integers(lo, hi + 1))
        self._flag = bool(self._rng.random() < 0.25)
        self._t = 0
        self._needs_reset = False
        return self._frame()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = checked_action(self._needs_reset, action, self.num_actions)
        reward = 1.0 if a == self._good else -0.1
        self._t += 1
        terminated = self._t >= self._length
        truncated = not terminated and self._limit > 0 and self._t >= self._limit
        self._needs_reset = terminated or truncated
        info = {"score": 3.0 * self._t, "success": terminated and self._flag}
        return self._frame(), reward, terminated, truncated, info

    def save_state(self) -> dict:
        """The episode's state now: the counters and the draw stream's position (the pattern follows from the seed)."""
        if self._needs_reset:
            raise RuntimeError("save_state() outside an episode: reset() first")
        rng = self._rng.bit_generator.state
        return dict(seed=self._seed, count=self._count, length=self._length, flag=self._flag, t=self._t, rng=rng)

    def restore_state(self, state: dict) -> np.ndarray:
        """Start an episode at ``state`` (from ``save_state``); returns the frame last returned before it was saved."""
        if state["seed"] != self._seed:
            self._seed_all(state["seed"])
        self._rng.bit_generator.state = state["rng"]
        self._length, self._flag, self._t = state["length"], state["flag"], state["t"]
        self._count = state["count"] - 1
        self._needs_reset = False
        return self._frame()

    def close(self) -> None:
        self._needs_reset = True


ENTRY = register(
    frame_entry(
        "fake",
        FakeEnv,
        lambda cfg: [f"action{i}" for i in range(options(cfg, "fake", FakeOptions).actions)],
        options_type=FakeOptions,
        states=True,
        score="Distance",
        success="Flags",
    )
)
