"""Fuel breaks: place B breaks, one cell per step, to shrink a wildfire that is already decided."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from shared.envs import EnvEntry, options, register
from shared.errors import check, check_range, is_int
from shared.spec import EnvSpec, checked_actions

if TYPE_CHECKING:
    from shared.config import EnvConfig

P_H, C1, C2, A_SLOPE = 0.58, 0.045, 0.131, 0.078  # Alexandridis et al. 2008
P_VEG = np.array([-0.3, 0.0, 0.4])  # agricultural, shrubs, pine
P_DEN = np.array([-0.4, 0.0, 0.3])  # sparse, normal, dense
MAX_FUEL = (1 + P_VEG.max()) * (1 + P_DEN.max())  # 1.82
CELL_M, MAX_RELIEF, MAX_WIND = 30.0, 150.0, 10.0  # m, m, m/s
UNBURNABLE = (0.10, 0.30)  # fraction of unburnable cells, drawn per episode
DIRS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))  # spread (dy, dx)
CHANNELS = ("fuel", "elevation", "breaks", "ignitions", "burned", "wind_x", "wind_y", "budget")


def _slices(dy: int, dx: int, h: int, w: int) -> tuple[tuple, tuple]:
    """Index tuples (source, target) over [n, H, W] so that target[y, x] is source[y - dy, x - dx]."""
    span = lambda d, n: (slice(max(-d, 0), n - max(d, 0)), slice(max(d, 0), n - max(-d, 0)))  # noqa: E731
    (sy, ty), (sx, tx) = span(dy, h), span(dx, w)
    return (slice(None), sy, sx), (slice(None), ty, tx)


def spread_probability(veg, den, elevation, wind_dir, wind_speed) -> np.ndarray:
    """p_burn [n, 8, H, W] of the edge from the neighbour at -DIRS[d] into each cell (0 off the grid)."""
    veg, den, elevation = np.asarray(veg), np.asarray(den), np.asarray(elevation, np.float32)
    n, h, w = elevation.shape
    fuel = (P_H * (1 + P_VEG[veg]) * (1 + P_DEN[den])).astype(np.float32)
    wx, wy = np.cos(wind_dir), np.sin(wind_dir)
    speed = np.asarray(wind_speed, np.float64)
    p = np.zeros((n, 8, h, w), np.float32)
    for d, (dy, dx) in enumerate(DIRS):
        dist = math.hypot(dy, dx)
        p_w = np.exp(speed * (C1 + C2 * ((wx * dx + wy * dy) / dist - 1))).astype(np.float32)
        src, tgt = _slices(dy, dx, h, w)
        rise = elevation[tgt] - elevation[src]
        p_s = np.exp(A_SLOPE * np.degrees(np.arctan(rise / (CELL_M * dist))))
        p[(slice(None), d) + tgt[1:]] = fuel[tgt] * p_w[:, None, None] * p_s
    return p


def burn(open_edges: np.ndarray, passable: np.ndarray, ignition: np.ndarray) -> np.ndarray:
    """Run the CA to the end for n fires at once, bit-packed across fires; the burned map [n, H, W] (ignitions included).
    ``open_edges`` [n, 8, H, W] as :func:`spread_probability`'s edges; ``passable``: burnable, not a break."""
    n, h, w = passable.shape
    pack = lambda a: np.packbits(a, axis=0, bitorder="little")  # noqa: E731
    edges = [
        (src, tgt, pack(open_edges[(slice(None), d) + tgt[1:]]))
        for d, (src, tgt) in enumerate(_slices(dy, dx, h, w) for dy, dx in DIRS)
    ]
    passable = pack(passable)
    burning = pack(ignition) & passable
    burned = burning.copy()
    new = np.empty_like(burning)
    while burning.any():  # each CA step burns at least one new cell: at most H*W steps
        new[:] = 0
        for src, tgt, open_d in edges:
            new[tgt] |= burning[src] & open_d
        new &= passable
        new &= ~burned
        burned |= new
        burning, new = new, burning
    return np.unpackbits(burned, axis=0, count=n, bitorder="little").astype(bool)


def _smooth_noise(rng: np.random.Generator, n: int, h: int, w: int, r: int, passes: int = 3) -> np.ndarray:
    """Standard normal noise box-blurred (radius r, edge padding) ``passes`` times, standardised per env."""
    x = rng.standard_normal((n, h, w))
    for _ in range(passes):
        for axis in (1, 2):
            pad = [(r + 1, r) if a == axis else (0, 0) for a in range(3)]
            c = np.cumsum(np.pad(x, pad, mode="edge"), axis=axis)
            size = x.shape[axis]  # window sum over [i - r, i + r] = c[i + 2r + 1] - c[i] (padded indices)
            x = np.take(c, np.arange(2 * r + 1, 2 * r + 1 + size), axis) - np.take(c, np.arange(size), axis)
            x /= 2 * r + 1
    x -= x.mean(axis=(1, 2), keepdims=True)
    return x / (x.std(axis=(1, 2), keepdims=True) + 1e-12)


def _terciles(x: np.ndarray) -> np.ndarray:
    """0 / 1 / 2 where standardised noise lies below / between / above its normal terciles (+-0.4307)."""
    return (x > -0.4307).astype(np.int64) + (x > 0.4307)


class FuelBreakVectorEnv:
    """E fuel-break games stepped together (docs/envs/fuelbreak.md)."""

    def __init__(
        self, num_envs: int = 16, size: int | tuple[int, int] = 32, budget: int = 16, ignitions: int = 3, seed: int | None = 0
    ):
        h, w = cast("tuple[int, int]", (size, size) if np.isscalar(size) else size)
        if int(num_envs) < 1:
            raise ValueError(f"num_envs {num_envs!r} must be >= 1")
        if int(h) < 8 or int(w) < 8:
            raise ValueError(f"size {size!r} must be >= 8 on each side")
        if int(ignitions) < 1:
            raise ValueError(f"ignitions {ignitions!r} must be >= 1")
        cells = int(h) * int(w)
        room = cells - math.ceil(UNBURNABLE[1] * cells) - int(ignitions)  # cells always free for breaks
        if not 1 <= int(budget) <= room:
            raise ValueError(f"budget {budget!r} must be in [1, {room}] for a {h}x{w} board with {ignitions} ignitions")
        self.num_envs, self.height, self.width = e, h, w = int(num_envs), int(h), int(w)
        self.budget, self.ignitions = int(budget), int(ignitions)
        self.spec = EnvSpec(obs_shape=(len(CHANNELS), h, w), obs_dtype="uint8", stack=1, num_actions=cells, masked=True)
        self._rng = np.random.default_rng(seed)
        # burned: the fire under the current breaks
        self.burnable, self.ignition, self.breaks, self.burned = (np.zeros((e, h, w), bool) for _ in range(4))
        self.fuel, self.elevation = np.zeros((e, h, w)), np.zeros((e, h, w))  # fuel: (1 + p_veg)(1 + p_den), 0 unburnable
        self.open_edges, self.wind = np.zeros((e, 8, h, w), bool), np.zeros((e, 2))  # wind: (V_x, V_y) m/s
        self.baseline, self.placed = np.zeros(e, np.int64), np.zeros(e, np.int64)  # baseline: burned cells without breaks
        self._started = False

    def _fire(self, idx: np.ndarray) -> np.ndarray:
        return burn(self.open_edges[idx], self.burnable[idx] & ~self.breaks[idx], self.ignition[idx])

    def _start(self, idx: np.ndarray, veg, den, elevation, wind_dir, wind_speed, uniforms) -> None:
        """Begin new episodes in envs ``idx`` on the given landscapes (burnable and ignition already set)."""
        self.fuel[idx] = np.where(self.burnable[idx], (1 + P_VEG[veg]) * (1 + P_DEN[den]), 0.0)
        self.elevation[idx] = elevation
        self.wind[idx] = np.stack([wind_speed * np.cos(wind_dir), wind_speed * np.sin(wind_dir)], 1)
        p = spread_probability(veg, den, elevation, wind_dir, wind_speed)
        self.open_edges[idx] = (uniforms < p) & self.burnable[idx][:, None]
        self.breaks[idx], self.placed[idx] = False, 0
        self.burned[idx] = self._fire(idx)
        self.baseline[idx] = self.burned[idx].sum(axis=(1, 2))

    def _new_episodes(self, idx: np.ndarray) -> None:
        n, h, w, rng = len(idx), self.height, self.width, self._rng
        if n == 0:
            return
        side = min(h, w)
        noise = _smooth_noise(rng, n, h, w, max(1, side // 16)).reshape(n, -1)
        unburnable = np.floor(rng.uniform(*UNBURNABLE, size=n) * h * w).astype(int)
        burnable = noise >= np.sort(noise, axis=1)[np.arange(n), unburnable][:, None]  # lowest noise: unburnable
        veg = _terciles(_smooth_noise(rng, n, h, w, max(1, side // 16)))
        den = _terciles(_smooth_noise(rng, n, h, w, 1, passes=1))
        elev = _smooth_noise(rng, n, h, w, max(1, side // 8))
        elev -= elev.min(axis=(1, 2), keepdims=True)
        elev *= rng.uniform(0, MAX_RELIEF, n)[:, None, None] / (elev.max(axis=(1, 2), keepdims=True) + 1e-12)
        wind_dir, wind_speed = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, MAX_WIND, n)
        count = rng.integers(1, self.ignitions + 1, n)
        keys = np.where(burnable, rng.random((n, h * w)), 2.0)
        first = np.argpartition(keys, self.ignitions - 1, axis=1)[:, : self.ignitions]
        ignition = np.zeros((n, h * w), bool)
        np.put_along_axis(ignition, first, np.arange(self.ignitions) < count[:, None], axis=1)
        self.burnable[idx], self.ignition[idx] = burnable.reshape(n, h, w), ignition.reshape(n, h, w)
        self._start(idx, veg, den, elev, wind_dir, wind_speed, rng.random((n, 8, h, w), np.float32))

    def set_episode(
        self, i: int, burnable, ignition, *, veg=None, den=None, elevation=None, wind_dir=0.0, wind_speed=0.0, uniforms=None
    ) -> np.ndarray:
        """Test and evaluation hook: restart env ``i`` on a given landscape (bool/int [H, W] maps; default 1 shrubs, normal
        density, flat, uniforms from the env's RNG); returns the obs of all envs."""
        if not self._started:
            raise RuntimeError("set_episode() before reset()")
        h, w = self.height, self.width
        burnable, ignition = np.asarray(burnable, bool), np.asarray(ignition, bool)
        if burnable.shape != (h, w) or ignition.shape != (h, w) or not ignition.any() or (ignition & ~burnable).any():
            raise ValueError("burnable and ignition must be [H, W], with ignitions only on burnable cells")
        if (burnable & ~ignition).sum() < self.budget:
            raise ValueError(f"only {(burnable & ~ignition).sum()} free cells for a budget of {self.budget}")
        uniforms = self._rng.random((8, h, w)) if uniforms is None else uniforms
        idx = np.array([i])
        self.burnable[idx], self.ignition[idx] = burnable, ignition
        grid = lambda a, fill, dt: np.full((1, h, w), fill, dt) if a is None else np.asarray(a, dt)[None]  # noqa: E731
        land = grid(veg, 1, int), grid(den, 1, int), grid(elevation, 0.0, float)
        self._start(idx, *land, np.array([wind_dir], float), np.array([wind_speed], float), np.asarray(uniforms)[None])
        return self._observe()

    def _observe(self) -> np.ndarray:
        obs = np.empty((self.num_envs, len(CHANNELS), self.height, self.width), np.uint8)
        obs[:, 0] = np.rint(255 * self.fuel / MAX_FUEL)
        obs[:, 1] = np.rint(255 * np.clip(self.elevation / MAX_RELIEF, 0, 1))
        obs[:, 2], obs[:, 3], obs[:, 4] = self.breaks * 255, self.ignition * 255, self.burned * 255
        wind = np.rint(127.5 + 127.5 * np.clip(self.wind / MAX_WIND, -1, 1))
        obs[:, 5], obs[:, 6] = wind[:, 0, None, None], wind[:, 1, None, None]
        obs[:, 7] = np.rint(255 * (self.budget - self.placed) / self.budget)[:, None, None]
        return obs

    def action_mask(self) -> np.ndarray:
        return (self.burnable & ~self.breaks & ~self.ignition).reshape(self.num_envs, -1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._new_episodes(np.arange(self.num_envs))
        self._started = True
        return self._observe()

    def step(self, actions):
        e, cells = self.num_envs, self.height * self.width
        actions = checked_actions(self._started, actions, e)
        rows = np.arange(e)
        inside = (actions >= 0) & (actions < cells)
        valid = inside & self.action_mask()[rows, np.where(inside, actions, 0)]
        if not valid.all():
            i = int(np.flatnonzero(~valid)[0])
            raise ValueError(
                f"env {i}: action {int(actions[i])} is not a valid cell (off the board, unburnable, a break or an ignition cell)"
            )
        before = self.burned.sum(axis=(1, 2))
        hit = self.burned.reshape(e, -1)[rows, actions]  # a break off the fire changes nothing
        self.breaks.reshape(e, -1)[rows, actions] = True
        changed = np.flatnonzero(hit)
        if len(changed):
            self.burned[changed] = self._fire(changed)
        after = self.burned.sum(axis=(1, 2))
        reward = ((before - after) / cells).astype(np.float32)
        self.placed += 1
        terminated = self.placed >= self.budget
        score = (self.baseline - after).astype(np.float64)
        info = {"score": score, "success": score > 0, "burned": after, "burned_baseline": self.baseline.copy()}
        self._new_episodes(np.flatnonzero(terminated))
        return self._observe(), reward, terminated, np.zeros(e, bool), info

    def close(self) -> None:
        pass


@dataclass
class FuelbreakOptions:
    """Fuel breaks (``--env.fuelbreak.*``); episodes end at their budget (``env.max_episode_steps`` is not used)."""

    size: int = 32
    """Side of the square landscape in cells (>= 8); one action per cell."""
    budget: int = 16
    """Breaks placed per episode (one per step); the fire burns when the budget is spent."""
    ignitions: int = 3
    """Most ignition points per episode (each episode draws 1..this many)."""

    def validate(self) -> None:
        check(is_int(self.size) and 8 <= self.size <= 256, "env.fuelbreak.size", self.size, "must be an integer in [8, 256]")
        check_range(self, "env.fuelbreak.ignitions", 1, math.inf, "must be an integer >= 1")
        cells = self.size**2
        room = cells - math.ceil(UNBURNABLE[1] * cells) - self.ignitions  # cells always free for breaks
        where = f"on a {self.size}x{self.size} landscape with {self.ignitions} ignitions"
        check_range(self, "env.fuelbreak.budget", 1, room, f"must be an integer in [1, {room}] {where}")


def _make(cfg: EnvConfig, seeds: Sequence[int]) -> FuelBreakVectorEnv:
    o = options(cfg, "fuelbreak", FuelbreakOptions)
    return FuelBreakVectorEnv(len(seeds), size=o.size, budget=o.budget, ignitions=o.ignitions, seed=seeds[0])


def _action_names(cfg: EnvConfig) -> list[str]:
    n = options(cfg, "fuelbreak", FuelbreakOptions).size
    return [f"{y},{x}" for y in range(n) for x in range(n)]


ENTRY = register(
    EnvEntry(
        "fuelbreak",
        spec=lambda cfg: _make(cfg, [0]).spec,
        make=_make,
        action_names=_action_names,
        options_type=FuelbreakOptions,
        random_reference=True,
        reward_scale=100.0,  # rewards in percent of the landscape; why these values: docs/envs/fuelbreak.md
        envs_per_actor=32,
        eps_anneal_env_steps=128_000,  # 1,000 steps of each env with the default 4 actors of 32 envs
        target_sync_env_steps=32_000,
        broadcast_env_steps=12_288,
    )
)
