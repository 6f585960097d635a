"""Tests for shared/envs/snake.py: the vectorized Snake env, its flood-fill features against a BFS reference."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from shared.envs.snake import (
    DEATH_REWARD,
    FOOD_REWARD,
    NUM_ACTIONS,
    STEP_REWARD,
    SnakeVectorEnv,
    free_region_sizes,
)
from shared.spec import VectorEnv

DR, DC = (-1, 0, 1, 0), (0, 1, 0, -1)  # up, right, down, left
STRAIGHT, LEFT, RIGHT = 0, 1, 2


def bfs_region(free: np.ndarray, start: tuple[int, int]) -> int:
    """Pure-Python reference: cells of the 4-connected region of ``free`` containing ``start`` (0 if blocked)."""
    h, w = free.shape
    r0, c0 = start
    if not (0 <= r0 < h and 0 <= c0 < w) or not free[r0, c0]:
        return 0
    seen, todo = {start}, deque([start])
    while todo:
        r, c = todo.popleft()
        for dr, dc in zip(DR, DC):
            q = (r + dr, c + dc)
            if 0 <= q[0] < h and 0 <= q[1] < w and free[q] and q not in seen:
                seen.add(q)
                todo.append(q)
    return len(seen)


def reference_features(env: SnakeVectorEnv, i: int) -> np.ndarray:
    """Danger (3) and flood fill (3) of env ``i`` recomputed from its raw state, one BFS per candidate."""
    ttl, (hr, hc), heading = env._ttl[i], env._head[i], int(env._heading[i])
    free = ttl <= 1
    danger, flood = [], []
    for turn in (0, -1, 1):
        d = (heading + turn) % 4
        n = bfs_region(free, (int(hr) + DR[d], int(hc) + DC[d]))
        danger.append(float(n == 0))
        flood.append(n / free.size)
    return np.array(danger + flood, np.float32)


def check_invariants(env: SnakeVectorEnv) -> None:
    """The body is ttl values 1..length, the head holds length, the food sits on a free cell."""
    for i in range(env.num_envs):
        ttl, length = env._ttl[i], int(env._length[i])
        assert sorted(ttl[ttl > 0].tolist()) == list(range(1, length + 1))
        assert ttl[tuple(env._head[i])] == length
        assert ttl[tuple(env._food[i])] == 0


def hungry_actions(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Noisy food-seeking that avoids danger and small regions, so snakes grow long and coil up."""
    heading = obs[:, 7:11].argmax(axis=1)
    dirs = (heading[:, None] + np.array([0, -1, 1])) % 4
    toward = np.take_along_axis(obs[:, 3:7], dirs, axis=1)
    scores = rng.random((len(obs), 3)) + toward - 4.0 * obs[:, 0:3] + 4.0 * obs[:, 11:14]
    return scores.argmax(axis=1)


# -- spec and shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,shape,dtype", [("features", (14,), np.float32), ("grid", (3, 7, 9), np.uint8)])
def test_shapes_and_dtypes_follow_the_spec(kind, shape, dtype):
    env = SnakeVectorEnv(5, size=(7, 9), seed=3, obs=kind)
    assert isinstance(env, VectorEnv)
    assert env.spec.obs_shape == shape and env.spec.obs_dtype == np.dtype(dtype).name
    assert env.spec.stack == 1 and env.spec.num_actions == 3 and not env.spec.masked
    obs = env.reset()
    assert obs.shape == (5, *shape) and obs.dtype == dtype
    obs2, reward, term, trunc, info = env.step(np.zeros(5, np.int64))
    assert obs2.shape == (5, *shape) and obs2.dtype == dtype
    assert reward.dtype == np.float32 and reward.shape == (5,)
    assert term.dtype == bool and trunc.dtype == bool and not (term & trunc).any()
    assert info["score"].dtype == np.float64 and info["success"].dtype == bool and info["length"].shape == (5,)
    mask = env.action_mask()
    assert mask.shape == (5, 3) and mask.all()
    obs2[:] = 0  # fresh arrays: scribbling on them does not touch the env
    assert env._observe().any()
    env.close()
    env.close()


def test_flood_switch_drops_the_last_three_features():
    on, off = SnakeVectorEnv(3, seed=1), SnakeVectorEnv(3, seed=1, flood=False)
    assert off.spec.obs_shape == (11,)
    np.testing.assert_array_equal(on.reset()[:, :11], off.reset())


def test_start_position_and_grid_planes():
    env = SnakeVectorEnv(16, size=10, seed=7, obs="grid")
    obs = env.reset()
    check_invariants(env)
    assert set(np.unique(obs).tolist()) == {0, 255}
    assert ((obs[:, 0] == 255).sum(axis=(1, 2)) == 2).all()  # body without the head
    assert ((obs[:, 1] == 255).sum(axis=(1, 2)) == 1).all() and ((obs[:, 2] == 255).sum(axis=(1, 2)) == 1).all()
    assert (env._ttl[:, 5, 5] == 2).all()  # the middle cell sits at the centre
    assert len(set(env._heading.tolist())) > 1  # headings are random


# -- flood fill against BFS ------------------------------------------------------------------------


@pytest.mark.parametrize("size,steps", [(6, 120), ((5, 8), 80), (10, 60)])
def test_danger_and_flood_fill_match_a_bfs_reference_on_played_states(size, steps):
    env = SnakeVectorEnv(12, size=size, seed=11)
    rng = np.random.default_rng(5)
    obs = env.reset()
    compared, longest, split = 0, 0, 0
    for _ in range(steps):
        for i in range(env.num_envs):
            ref = reference_features(env, i)
            np.testing.assert_allclose(obs[i, [0, 1, 2, 11, 12, 13]], ref, rtol=0, atol=1e-6)
            split += len({x for x in ref[3:] if x > 0}) > 1  # candidates in different regions
            compared += 1
        longest = max(longest, int(env._length.max()))
        obs, *_ = env.step(hungry_actions(obs, rng))
    check_invariants(env)
    assert compared >= 480 and longest >= 8 and split > 0  # the states were varied, not just fresh snakes


def test_free_region_sizes_match_bfs_on_random_masks():
    rng = np.random.default_rng(0)
    free = rng.random((40, 7, 9)) < rng.uniform(0.3, 0.8, size=(40, 1, 1))
    sizes = free_region_sizes(free)
    for e in range(free.shape[0]):
        for r in range(7):
            for c in range(9):
                assert sizes[e, r, c] == bfs_region(free[e], (r, c))
    # a long single-cell-wide spiral: many propagation steps before convergence
    spiral = np.zeros((1, 9, 9), bool)
    spiral[0, ::2, :] = True
    spiral[0, 1::4, -1] = spiral[0, 3::4, 0] = True
    assert (free_region_sizes(spiral)[spiral] == spiral.sum()).all()


# -- rules -----------------------------------------------------------------------------------------


def test_eating_grows_the_snake_and_scores():
    env = SnakeVectorEnv(2, seed=0)
    env.reset()
    env.place(0, [(5, 5), (6, 5), (7, 5)], heading=0, food=(4, 5))
    _, reward, term, trunc, info = env.step(np.array([STRAIGHT, STRAIGHT]))
    assert reward[0] == FOOD_REWARD and not term[0] and not trunc[0]
    assert info["score"][0] == 1 and info["length"][0] == 4 and env._length[0] == 4
    assert env._ttl[0, 7, 5] == 1  # the tail stayed
    assert tuple(env._head[0]) == (4, 5) and env._ttl[0, 4, 5] == 4
    check_invariants(env)  # new food on a free cell
    _, reward, *_ = env.step(np.array([STRAIGHT, STRAIGHT]))
    assert reward[0] == np.float32(STEP_REWARD) and env._ttl[0, 7, 5] == 0


def test_wall_death_terminates_and_auto_resets_with_score_reset():
    env = SnakeVectorEnv(1, seed=0)
    env.reset()
    env.place(0, [(1, 5), (2, 5), (3, 5)], heading=0, food=(0, 5))
    _, reward, term, _, info = env.step(np.array([STRAIGHT]))  # eat at the top row
    assert reward[0] == FOOD_REWARD and info["score"][0] == 1
    obs, reward, term, trunc, info = env.step(np.array([STRAIGHT]))  # into the wall
    assert reward[0] == DEATH_REWARD and term[0] and not trunc[0] and not info["success"][0]
    assert info["score"][0] == 1 and info["length"][0] == 4  # read before the reset
    assert env._length[0] == 3 and env._score[0] == 0 and (env._ttl[0] > 0).sum() == 3
    np.testing.assert_array_equal(obs, env._observe())  # the returned row is the new episode's first
    check_invariants(env)
    _, _, _, _, info = env.step(np.array([STRAIGHT]))
    assert info["score"][0] == 0


def test_self_collision_terminates_but_the_vacating_tail_cell_is_legal():
    env = SnakeVectorEnv(2, seed=0)
    env.reset()
    # Heading left with the tail just below the head: turning left enters the tail's cell as it leaves.
    env.place(0, [(5, 5), (5, 6), (6, 6), (6, 5)], heading=3, food=(0, 0))
    # Same, one longer: the cell below the head is the second-to-last and stays occupied.
    env.place(1, [(5, 5), (5, 6), (6, 6), (6, 5), (7, 5)], heading=3, food=(0, 0))
    obs = env._observe()
    assert obs[0, 1] == 0 and obs[1, 1] == 1  # danger left only for the longer snake
    _, reward, term, _, info = env.step(np.array([LEFT, LEFT]))
    assert not term[0] and reward[0] == np.float32(STEP_REWARD)
    assert tuple(env._head[0]) == (6, 5) and env._ttl[0, 6, 5] == 4
    assert term[1] and reward[1] == DEATH_REWARD and info["length"][1] == 5 and env._length[1] == 3
    check_invariants(env)


def test_circling_without_food_is_truncated_by_hunger():
    env = SnakeVectorEnv(1, seed=0, hunger=6)
    env.reset()
    env.place(0, [(5, 5), (6, 5), (6, 6)], heading=0, food=(0, 0))
    for t in range(1, 7):  # turning right forever: a 2x2 loop, always moving into the leaving tail
        _, reward, term, trunc, info = env.step(np.array([RIGHT]))
        assert not term[0] and reward[0] == np.float32(STEP_REWARD)
        assert trunc[0] == (t == 6)
    assert info["length"][0] == 3 and env._since_food[0] == 0 and env._t[0] == 0


def test_max_steps_truncates():
    env = SnakeVectorEnv(1, seed=0, max_steps=4, hunger=100)
    env.reset()
    env.place(0, [(5, 5), (6, 5), (6, 6)], heading=0, food=(0, 0))
    truncs = [env.step(np.array([RIGHT]))[3][0] for _ in range(5)]
    assert truncs == [False, False, False, True, False]


def test_filling_the_grid_is_a_terminated_success():
    env = SnakeVectorEnv(1, size=4, seed=0)
    env.reset()
    path = [(r, c if r % 2 == 0 else 3 - c) for r in range(4) for c in range(4)]  # boustrophedon
    env.place(0, path[14::-1], heading=3, food=path[15])
    _, reward, term, trunc, info = env.step(np.array([STRAIGHT]))
    assert reward[0] == FOOD_REWARD and term[0] and not trunc[0]
    assert info["success"][0] and info["length"][0] == 16 and info["score"][0] == 1
    assert env._length[0] == 3


# -- seeding ---------------------------------------------------------------------------------------


def play(env: SnakeVectorEnv, steps: int, seed: int, seed_reset: int | None = None):
    rng = np.random.default_rng(seed)
    out = [env.reset(seed_reset)]
    for _ in range(steps):
        obs, reward, term, trunc, info = env.step(rng.integers(3, size=env.num_envs))
        out += [obs, reward, term, trunc, info["score"]]
    return out


def test_same_seed_same_game_and_reset_seed_reseeds():
    a = play(SnakeVectorEnv(8, seed=4), 300, seed=1)
    b = play(SnakeVectorEnv(8, seed=4), 300, seed=1)
    c = play(SnakeVectorEnv(8, seed=99), 300, seed=1, seed_reset=4)
    d = play(SnakeVectorEnv(8, seed=5), 300, seed=1)
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert any(not np.array_equal(x, y) for x, y in zip(a, d))


def test_each_env_has_its_own_stream():
    small, big = SnakeVectorEnv(3, seed=2), SnakeVectorEnv(7, seed=2)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(small.reset(), big.reset()[:3])
    for _ in range(200):
        a = rng.integers(3, size=7)
        s, b = small.step(a[:3]), big.step(a)
        for x, y in zip(s[:4], b[:4]):
            np.testing.assert_array_equal(x, y[:3])


def test_random_policy_baseline_is_small_but_positive():
    env, rng = SnakeVectorEnv(32, size=10, seed=0, flood=False), np.random.default_rng(0)
    env.reset()
    scores: list[float] = []  # food eaten in each of the first 64 episodes to end, under uniformly random actions
    while len(scores) < 64:
        _, _, term, trunc, info = env.step(rng.integers(NUM_ACTIONS, size=32))
        scores.extend(info["score"][term | trunc].tolist())
    assert 0.0 < float(np.mean(scores[:64])) < 1.0


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"num_envs": 0}, "0"),
        ({"size": 3}, "3"),
        ({"size": (10, 2)}, "(10, 2)"),
        ({"obs": "pixels"}, "pixels"),
        ({"max_steps": -1}, "-1"),
        ({"hunger": 0}, "hunger 0"),
        ({"seed": -5}, "-5"),
    ],
)
def test_bad_constructor_input_raises_naming_the_value(kwargs, text):
    args = {"num_envs": 2, **kwargs}
    with pytest.raises(ValueError, match=text.replace("(", r"\(").replace(")", r"\)")):
        SnakeVectorEnv(**args)


def test_bad_actions_raise():
    env = SnakeVectorEnv(2)
    with pytest.raises(RuntimeError):
        env.step(np.zeros(2, np.int64))
    env.reset()
    with pytest.raises(ValueError, match="7"):
        env.step(np.array([0, 7]))
    with pytest.raises(ValueError, match=r"\(2,\)"):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError):
        env.step(np.zeros(2, np.float32))
