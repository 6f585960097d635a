"""Snake, numpy-vectorized: E games on H x W grids stepped by one call (a :class:`~shared.spec.VectorEnv`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from shared.envs import EnvEntry, options, register
from shared.errors import check, check_range, is_int
from shared.spec import EnvSpec, checked_actions

if TYPE_CHECKING:
    from shared.config import EnvConfig

NUM_ACTIONS = 3  # 0 straight, 1 turn left, 2 turn right
ACTION_NAMES = ["straight", "left", "right"]
FOOD_REWARD, DEATH_REWARD, STEP_REWARD = 10.0, -10.0, -0.01
START_LENGTH = 3
OBS_KINDS = ("features", "grid")

_DR, _DC = np.array([-1, 0, 1, 0]), np.array([0, 1, 0, -1])  # heading 0 up, 1 right, 2 down, 3 left
_TURN = np.array([0, -1, 1])  # action -> heading change (clockwise headings)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> 30)) * _M1
    z = (z ^ (z >> 27)) * _M2
    return z ^ (z >> 31)


def free_region_sizes(free: np.ndarray) -> np.ndarray:
    """Each cell's 4-connected free-region size in masks ``free[E, H, W]`` (0 if not free); how: docs/envs/snake.md."""
    free = np.asarray(free, dtype=bool)
    e, h, w = free.shape
    n = e * (h + 2) * (w + 2)
    lab = np.full(n + 1, n, dtype=np.int32)
    own = np.arange(n, dtype=np.int32).reshape(e, h + 2, w + 2)[:, 1:-1, 1:-1]
    lab[:n].reshape(e, h + 2, w + 2)[:, 1:-1, 1:-1] = np.where(free, own, n)
    floor = np.where(free, 0, n).astype(np.int32)  # max() with it keeps blocked cells at n
    m = np.empty_like(floor)
    while True:
        g = lab[:n].reshape(e, h + 2, w + 2)
        inner = g[:, 1:-1, 1:-1]
        np.minimum(np.minimum(g[:, :-2, 1:-1], g[:, 2:, 1:-1], out=m), g[:, 1:-1, :-2], out=m)
        np.minimum(np.minimum(m, g[:, 1:-1, 2:], out=m), inner, out=m)
        np.maximum(m, floor, out=m)
        before = lab.copy()
        np.minimum.at(lab, inner[free], m[free])  # hook: each free cell's label's label
        np.minimum(inner, m, out=inner)
        lab = lab.take(lab)
        lab = lab.take(lab)
        if np.array_equal(lab, before):
            break
    counts = np.bincount(lab, minlength=n + 1)
    counts[n] = 0
    return counts[lab[:n]].reshape(e, h + 2, w + 2)[:, 1:-1, 1:-1]


class SnakeVectorEnv:
    """``num_envs`` Snake games (docs/envs/snake.md)."""

    def __init__(
        self,
        num_envs: int,
        size: int | tuple[int, int] = 10,
        seed: int = 0,
        obs: str = "features",
        max_steps: int = 0,
        hunger: int | None = None,
        flood: bool = True,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs {num_envs!r} must be an integer >= 1")
        h, w = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 4 for d in (h, w)):
            raise ValueError(f"size {size!r} must be an integer >= 4 or a pair of them")
        if obs not in OBS_KINDS:
            raise ValueError(f"obs {obs!r} is not one of {OBS_KINDS}")
        if not isinstance(max_steps, (int, np.integer)) or max_steps < 0:
            raise ValueError(f"max_steps {max_steps!r} must be an integer >= 0 (0: no limit)")
        hunger = h * w if hunger is None else hunger
        if not isinstance(hunger, (int, np.integer)) or hunger < 1:
            raise ValueError(f"hunger {hunger!r} must be an integer >= 1")
        self.num_envs, self.height, self.width = e, h, w = int(num_envs), int(h), int(w)
        self.obs_kind, self.flood = obs, bool(flood)
        self.max_steps, self.hunger = int(max_steps), int(hunger)
        shape: tuple[int, ...] = (3, h, w) if obs == "grid" else (14 if self.flood else 11,)
        dtype = "uint8" if obs == "grid" else "float32"
        self.spec = EnvSpec(obs_shape=shape, obs_dtype=dtype, stack=1, num_actions=NUM_ACTIONS, masked=False)
        self._ar = np.arange(e)
        self._ttl = np.zeros((e, h, w), np.int32)
        self._head, self._food = np.zeros((e, 2), np.int64), np.zeros((e, 2), np.int64)
        self._heading, self._length, self._score, self._since_food, self._t = (np.zeros(e, np.int64) for _ in range(5))
        self._seed(seed)
        self._started = False

    def _seed(self, seed: int) -> None:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed {seed!r} must be an integer >= 0")
        base = np.random.SeedSequence(int(seed)).generate_state(1, np.uint64)
        self._rng = _mix(base + np.arange(self.num_envs, dtype=np.uint64) * _M1)

    def _draw(self, idx: np.ndarray, k: int) -> np.ndarray:
        """``k`` fresh uint64 draws from each of the streams ``idx``: ``[len(idx), k]``."""
        x = self._rng[idx][:, None] + np.arange(1, k + 1, dtype=np.uint64) * _GOLDEN
        self._rng[idx] = x[:, -1]
        return _mix(x)

    def _place_food(self, idx: np.ndarray) -> None:
        free = self._ttl[idx].reshape(len(idx), -1) == 0
        scores = np.where(free, self._draw(idx, free.shape[1]) | np.uint64(1), np.uint64(0))
        self._food[idx, 0], self._food[idx, 1] = np.divmod(scores.argmax(axis=1), self.width)

    def _reset_envs(self, idx: np.ndarray) -> None:
        heading = (self._draw(idx, 1)[:, 0] % np.uint64(4)).astype(np.int64)
        dr, dc = _DR[heading], _DC[heading]
        r, c = self.height // 2, self.width // 2
        self._ttl[idx] = 0
        back = np.arange(START_LENGTH)  # head, middle, tail: 1, 0, -1 cells along the heading
        self._ttl[idx[:, None], r + (1 - back) * dr[:, None], c + (1 - back) * dc[:, None]] = START_LENGTH - back
        self._head[idx, 0], self._head[idx, 1] = r + dr, c + dc
        self._heading[idx], self._length[idx] = heading, START_LENGTH
        self._score[idx] = self._since_food[idx] = self._t[idx] = 0
        self._place_food(idx)

    def place(self, i: int, body: list[tuple[int, int]], heading: int, food: tuple[int, int]) -> None:
        """Start env ``i`` on a given position (tests, debugging): ``body`` head first, ``food`` on a free cell."""
        cells = [(int(r), int(c)) for r, c in body]
        if len(set(cells)) != len(cells) or not all(0 <= r < self.height and 0 <= c < self.width for r, c in cells):
            raise ValueError(f"body {body!r} must be distinct cells inside the grid")
        if tuple(food) in cells or not (0 <= food[0] < self.height and 0 <= food[1] < self.width):
            raise ValueError(f"food {food!r} must be a free cell inside the grid")
        self._ttl[i] = 0
        for k, (r, c) in enumerate(cells):
            self._ttl[i, r, c] = len(cells) - k
        self._head[i], self._heading[i], self._length[i], self._food[i] = cells[0], int(heading) % 4, len(cells), food
        self._score[i] = self._since_food[i] = self._t[i] = 0

    def _observe(self) -> np.ndarray:
        e, hr, hc = self.num_envs, self._head[:, 0], self._head[:, 1]
        if self.obs_kind == "grid":
            out = np.zeros((e, 3, self.height, self.width), np.uint8)
            out[:, 0] = np.where(self._ttl > 0, 255, 0)
            out[self._ar, 0, hr, hc] = 0
            out[self._ar, 1, hr, hc] = 255
            out[self._ar, 2, self._food[:, 0], self._food[:, 1]] = 255
            return out
        out = np.zeros((e, self.spec.obs_shape[0]), np.float32)
        dirs = (self._heading[:, None] + _TURN[None, :]) % 4  # straight, left, right
        cr, cc = hr[:, None] + _DR[dirs], hc[:, None] + _DC[dirs]
        inside = (cr >= 0) & (cr < self.height) & (cc >= 0) & (cc < self.width)
        rr, ccl = np.clip(cr, 0, self.height - 1), np.clip(cc, 0, self.width - 1)
        env = self._ar[:, None]
        safe = inside & (self._ttl[env, rr, ccl] <= 1)
        out[:, 0:3] = ~safe
        fr, fc = self._food[:, 0], self._food[:, 1]
        out[:, 3], out[:, 4], out[:, 5], out[:, 6] = fr < hr, fc > hc, fr > hr, fc < hc
        out[self._ar, 7 + self._heading] = 1
        if self.flood:
            sizes = free_region_sizes(self._ttl <= 1)
            out[:, 11:14] = np.where(safe, sizes[env, rr, ccl], 0) / (self.height * self.width)
        return out

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._seed(seed)
        self._reset_envs(self._ar)
        self._started = True
        return self._observe()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = checked_actions(self._started, actions, self.num_envs)
        bad = (a < 0) | (a >= NUM_ACTIONS)
        if bad.any():
            raise ValueError(f"action {a[bad][0]!r} out of range [0, {NUM_ACTIONS})")
        ar, h, w = self._ar, self.height, self.width
        self._heading = (self._heading + _TURN[a]) % 4
        nr, nc = self._head[:, 0] + _DR[self._heading], self._head[:, 1] + _DC[self._heading]
        inside = (nr >= 0) & (nr < h) & (nc >= 0) & (nc < w)
        nr, nc = np.clip(nr, 0, h - 1), np.clip(nc, 0, w - 1)
        dead = ~inside | (self._ttl[ar, nr, nc] > 1)  # ttl 1 is the tail, which leaves this step
        alive = ~dead
        eat = alive & (nr == self._food[:, 0]) & (nc == self._food[:, 1])
        self._ttl -= (self._ttl > 0) & (alive & ~eat)[:, None, None]
        self._length += eat
        self._ttl[ar[alive], nr[alive], nc[alive]] = self._length[alive]
        self._head[alive, 0], self._head[alive, 1] = nr[alive], nc[alive]
        self._score += eat
        self._since_food = np.where(eat, 0, self._since_food + 1)
        self._t += 1
        win = eat & (self._length == h * w)
        feed = np.flatnonzero(eat & ~win)
        if feed.size:
            self._place_food(feed)
        reward = np.where(dead, DEATH_REWARD, np.where(eat, FOOD_REWARD, STEP_REWARD)).astype(np.float32)
        terminated = dead | win
        truncated = ~terminated & ((self._since_food >= self.hunger) | (self.max_steps > 0) & (self._t >= self.max_steps))
        info = {"score": self._score.astype(np.float64), "success": win.copy(), "length": self._length.copy()}
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            self._reset_envs(done)
        return self._observe(), reward, terminated, truncated, info

    def action_mask(self) -> np.ndarray:
        return np.ones((self.num_envs, NUM_ACTIONS), dtype=bool)

    def close(self) -> None:
        pass


@dataclass
class SnakeOptions:
    """Snake (``--env.snake.*``); ``env.max_episode_steps`` is its max_steps."""

    size: int = 10
    """Side of the square grid, in cells (>= 4)."""
    obs: Literal["features", "grid"] = "features"
    """'features' (float32 (14,): danger, food direction, heading, flood fill; an MLP) or 'grid' (uint8 (3, H, W); a conv net)."""
    hunger: int = 0
    """Steps in a row without eating that truncate an episode; 0: the number of cells (a Hamiltonian cycle never starves)."""
    flood: bool = True
    """The three flood-fill features (reachable free cells straight, left, right, over H*W) in the 'features' observation."""

    def validate(self) -> None:
        check(is_int(self.size) and 4 <= self.size <= 256, "env.snake.size", self.size, "must be an integer in [4, 256]")
        check(self.obs in OBS_KINDS, "env.snake.obs", self.obs, "must be 'features' or 'grid'")
        check_range(self, "env.snake.hunger", 0, math.inf, "must be an integer >= 0 (0: the number of cells)")


def _make(cfg: EnvConfig, seeds: Sequence[int]) -> SnakeVectorEnv:
    o = options(cfg, "snake", SnakeOptions)
    return SnakeVectorEnv(
        len(seeds), size=o.size, seed=seeds[0], obs=o.obs, max_steps=cfg.max_episode_steps, hunger=o.hunger or None, flood=o.flood
    )


ENTRY = register(
    EnvEntry(
        "snake",
        spec=lambda cfg: _make(cfg, [0]).spec,
        make=_make,
        action_names=lambda cfg: list(ACTION_NAMES),
        options_type=SnakeOptions,
        random_reference=True,
        reward_scale=0.1,  # food and death are +-10
    )
)
