"""FuelBreakVectorEnv: the VectorEnv contract, the Alexandridis CA, common random numbers, the reward."""

import math
from collections import deque

import numpy as np
import pytest

from shared.envs.fuelbreak import (
    CHANNELS,
    DIRS,
    FuelBreakVectorEnv,
    burn,
    spread_probability,
)
from shared.spec import VectorEnv

FUEL, ELEV, BREAKS, IGNITIONS, BURNED, WIND_X, WIND_Y, BUDGET = range(8)


def random_valid_actions(mask, rng):
    """One action per row of ``mask`` [E, A], uniform over its True entries (int64 [E])."""
    mask = np.asarray(mask, bool)
    if not mask.any(axis=1).all():
        raise ValueError(f"rows {np.flatnonzero(~mask.any(axis=1)).tolist()} of the mask have no valid action")
    return np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1)


def mask_from_obs(obs):
    free = (obs[:, FUEL] > 0) & (obs[:, BREAKS] == 0) & (obs[:, IGNITIONS] == 0)
    return free.reshape(len(obs), -1)


def reachable(open_edges, passable, ignition):
    """Reference: breadth-first search over open edges, one cell at a time."""
    h, w = passable.shape
    seen = ignition & passable
    queue = deque(zip(*np.nonzero(seen)))
    while queue:
        y, x = queue.popleft()
        for d, (dy, dx) in enumerate(DIRS):
            ty, tx = y + dy, x + dx
            if 0 <= ty < h and 0 <= tx < w and not seen[ty, tx] and passable[ty, tx] and open_edges[d, ty, tx]:
                seen[ty, tx] = True
                queue.append((ty, tx))
    return seen


def test_shapes_dtypes_and_spec():
    env = FuelBreakVectorEnv(num_envs=3, size=16, budget=4, seed=1)
    assert isinstance(env, VectorEnv)
    assert env.spec.obs_shape == (len(CHANNELS), 16, 16) and env.spec.obs_dtype == "uint8"
    assert env.spec.num_actions == 256 and env.spec.masked and env.spec.stack == 1
    obs = env.reset()
    assert obs.shape == (3, 8, 16, 16) and obs.dtype == np.uint8
    mask = env.action_mask()
    assert mask.shape == (3, 256) and mask.dtype == bool and mask.any(axis=1).all()
    obs2, reward, term, trunc, info = env.step(random_valid_actions(mask, np.random.default_rng(0)))
    assert obs2.shape == obs.shape and obs2.dtype == np.uint8
    assert reward.shape == (3,) and reward.dtype == np.float32
    assert term.dtype == bool and trunc.dtype == bool and not trunc.any() and not term.any()
    assert info["score"].dtype == np.float64 and info["success"].dtype == bool
    assert info["burned"].shape == info["burned_baseline"].shape == (3,)
    assert (obs2[:, BUDGET] == round(255 * 3 / 4)).all()
    obs2[:] = 0  # fresh arrays: the env does not reuse them
    assert env.action_mask().sum() == mask.sum() - 3 and env._observe().any()
    env.close()
    env.close()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"size": 7}, "size"),
        ({"budget": 0}, "budget"),
        ({"budget": 256}, "budget"),
        ({"ignitions": 0}, "ignitions"),
        ({"num_envs": 0}, "num_envs"),
    ],
)
def test_bad_constructor_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FuelBreakVectorEnv(**{"size": 16, **kwargs})


def test_mask_semantics_and_refresh_after_autoreset():
    env = FuelBreakVectorEnv(num_envs=4, size=16, budget=2, seed=3)
    obs = env.reset()
    mask = env.action_mask()
    assert (mask == mask_from_obs(obs)).all()
    assert (obs[:, FUEL] == 0).any() and not mask.reshape(4, 16, 16)[obs[:, FUEL] == 0].any()  # unburnable
    assert not mask.reshape(4, 16, 16)[obs[:, IGNITIONS] > 0].any()
    actions = random_valid_actions(mask, np.random.default_rng(0))
    obs, _, term, _, _ = env.step(actions)
    assert not term.any() and not env.action_mask()[np.arange(4), actions].any()  # breaks are invalid now
    assert (obs[:, BREAKS].reshape(4, -1)[np.arange(4), actions] == 255).all()
    before = obs.copy()
    obs, _, term, _, _ = env.step(random_valid_actions(env.action_mask(), np.random.default_rng(1)))
    assert term.all()  # auto-reset: obs and mask rows belong to the new episodes
    assert (obs[:, BREAKS] == 0).all() and (obs[:, BUDGET] == 255).all()
    assert (env.action_mask() == mask_from_obs(obs)).all()
    assert not (obs[:, IGNITIONS] == before[:, IGNITIONS]).all()


def test_invalid_action_raises_and_changes_nothing():
    env = FuelBreakVectorEnv(num_envs=2, size=16, budget=4, seed=5)
    obs = env.reset()
    actions = random_valid_actions(env.action_mask(), np.random.default_rng(0))
    for bad in (int(np.flatnonzero(obs[1, IGNITIONS])[0]), int(np.flatnonzero(obs[1, FUEL] == 0)[0]), 256, -1):
        with pytest.raises(ValueError, match=f"env 1: action {bad} "):
            env.step(np.array([actions[0], bad]))
    assert (env._observe() == obs).all()
    env.step(actions)
    with pytest.raises(ValueError, match=f"env 0: action {actions[0]} "):  # already a break
        env.step(np.array([actions[0], int(np.flatnonzero(env.action_mask()[1])[0])]))
    with pytest.raises(ValueError):
        env.step(np.array([0.5, 1.5]))


def test_determinism_for_a_seed():
    def run(seed):
        env, rng = FuelBreakVectorEnv(num_envs=3, size=12, budget=3, seed=seed), np.random.default_rng(0)
        out = [env.reset()]
        for _ in range(7):
            obs, reward, term, _, info = env.step(random_valid_actions(env.action_mask(), rng))
            out += [obs, reward, term, info["score"]]
        return out

    a, b, c = run(11), run(11), run(12)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_reward_sums_to_the_reduction_by_recomputation():
    e, size = 6, 16
    cells = size * size
    env, rng = FuelBreakVectorEnv(num_envs=e, size=size, budget=8, ignitions=3, seed=7), np.random.default_rng(2)
    obs = env.reset()
    landscape = env.open_edges.copy(), env.burnable.copy(), env.ignition.copy()
    baseline = burn(*landscape)
    assert (obs[:, BURNED] > 0).sum(axis=(1, 2)).tolist() == baseline.sum(axis=(1, 2)).tolist()
    total, breaks = np.zeros(e), np.zeros((e, size, size), bool)
    for _ in range(8):
        before = (obs[:, BURNED] > 0).sum(axis=(1, 2))
        actions = random_valid_actions(env.action_mask(), rng)
        breaks.reshape(e, -1)[np.arange(e), actions] = True
        obs, reward, term, _, info = env.step(actions)
        burned = burn(landscape[0], landscape[1] & ~breaks, landscape[2]).sum(axis=(1, 2))
        assert (reward * cells).tolist() == (before - burned).tolist()  # exact: cells is a power of two
        total += reward
    assert term.all()
    assert info["burned"].tolist() == burned.tolist()
    assert info["burned_baseline"].tolist() == baseline.sum(axis=(1, 2)).tolist()
    assert (total * cells).tolist() == (info["burned_baseline"] - info["burned"]).tolist() == info["score"].tolist()
    assert (info["success"] == (info["score"] > 0)).all()


def test_a_ring_of_breaks_confines_the_fire():
    env = FuelBreakVectorEnv(num_envs=2, size=8, budget=8, seed=0)
    env.reset()
    ignition = np.zeros((8, 8), bool)
    ignition[3, 3] = True
    obs = env.set_episode(0, np.ones((8, 8), bool), ignition, veg=np.full((8, 8), 2), den=np.full((8, 8), 2))
    assert (obs[0, BURNED] == 255).all()  # p_burn = 0.58 * 1.4 * 1.3 > 1: every edge is open
    ring = [(3 + dy) * 8 + 3 + dx for dy, dx in DIRS]
    rng = np.random.default_rng(0)
    for t, cell in enumerate(ring):
        other = random_valid_actions(env.action_mask(), rng)[1]
        obs, reward, term, _, info = env.step(np.array([cell, other]))
        if t < 7:  # the fire gets round through the gap
            assert reward[0] == 1 / 64 and (obs[0, BURNED] > 0).sum() == 64 - (t + 1)
    assert reward[0] == (57 - 1) / 64 and term.all()
    assert info["burned"][0] == 1 and info["burned_baseline"][0] == 64 and info["score"][0] == 63


def test_unbroken_fire_is_the_reachable_region_through_burnable_cells():
    env = FuelBreakVectorEnv(num_envs=8, size=12, budget=2, ignitions=3, seed=4)
    obs = env.reset()
    for i in range(8):
        burned = obs[i, BURNED] > 0
        assert not (burned & ~env.burnable[i]).any() and (burned >= env.ignition[i]).all()
        assert (burned == reachable(env.open_edges[i], env.burnable[i], env.ignition[i])).all()
        all_edges = np.ones((8, 12, 12), bool)  # 8-connected through burned cells to an ignition
        assert (reachable(all_edges, burned, env.ignition[i]) == burned).all()
    assert 0 < (obs[:, BURNED] > 0).mean() < (obs[:, FUEL] > 0).mean()


def test_spread_probability_uses_the_paper_constants():
    flat, zero = np.zeros((1, 2, 2)), np.zeros(1)
    p = spread_probability(np.full((1, 2, 2), 2), np.full((1, 2, 2), 2), flat, zero, zero)
    east, west = DIRS.index((0, 1)), DIRS.index((0, -1))
    assert p[0, east, 0, 1] == pytest.approx(0.58 * 1.4 * 1.3) and p[0, east, 0, 0] == 0  # no source off the grid
    p = spread_probability(np.ones((1, 2, 2), int), np.zeros((1, 2, 2), int), flat, zero, np.array([10.0]))
    assert p[0, east, 0, 1] == pytest.approx(0.58 * 0.6 * math.exp(0.045 * 10))
    assert p[0, west, 0, 0] == pytest.approx(0.58 * 0.6 * math.exp(0.045 * 10 - 10 * 0.131 * 2))
    hill = np.array([[[0.0, 30.0], [0.0, 30.0]]])  # 30 m up over one 30 m cell: 45 degrees
    p = spread_probability(np.ones((1, 2, 2), int), np.ones((1, 2, 2), int), hill, zero, zero)
    assert p[0, east, 0, 1] == pytest.approx(0.58 * math.exp(0.078 * 45), rel=1e-5)
    assert p[0, west, 0, 0] == pytest.approx(0.58 * math.exp(-0.078 * 45), rel=1e-5)


def test_wind_makes_downwind_spread_larger():
    size, n = 21, 32
    env = FuelBreakVectorEnv(num_envs=n, size=size, budget=1, seed=9)
    env.reset()
    ignition = np.zeros((size, size), bool)
    ignition[10, 10] = True
    for toward, sign in ((0.0, 1), (math.pi, -1)):  # wind blowing toward +x, then toward -x
        for i in range(n):
            obs = env.set_episode(i, np.ones((size, size), bool), ignition, wind_dir=toward, wind_speed=6.0)
        assert ((obs[:, WIND_X].astype(int) - 128) * sign > 70).all() and (obs[:, WIND_Y] == 128).all()
        burned = obs[:, BURNED] > 0
        east, west = burned[:, :, 11:].sum(), burned[:, :, :10].sum()
        downwind, upwind = (east, west) if sign > 0 else (west, east)
        assert downwind > 1.25 * upwind  # about 1.4-1.9 over seeds: the fire also flanks round upwind


def test_action_helpers():
    rng = np.random.default_rng(0)
    mask = np.zeros((3, 5), bool)
    mask[0, [1, 3]] = True
    mask[1, 4] = True
    mask[2] = True
    picks = np.stack([random_valid_actions(mask, rng) for _ in range(400)])
    assert mask[np.arange(3), picks].all()
    assert set(picks[:, 0]) == {1, 3} and set(picks[:, 2]) == set(range(5))
    with pytest.raises(ValueError):
        random_valid_actions(np.zeros((1, 4), bool), rng)
