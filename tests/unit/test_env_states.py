"""Env states: an episode started from a saved state is, frame for frame and reward for reward, the episode reached by
playing its prefix from the true start (Mario's real emulator, the fake env), and the vector env starts where told."""

import numpy as np
import pytest

from shared.config import EnvConfig
from shared.envs import entry_for, make_env, make_vector_env
from shared.envs.frames import FrameState
from shared.envs.mario import ACTION_SETS, MarioOptions


def _play(env, actions):
    """(frame, reward, terminated, truncated, score, success) of each step until the episode ends."""
    out = []
    for a in actions:
        frame, r, term, trunc, info = env.step(int(a))
        out.append((frame.copy(), r, term, trunc, info["score"], info["success"]))
        if term or trunc:
            break
    return out


def _assert_same(a, b):
    assert len(a) == len(b), (len(a), len(b))
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x[0], y[0]), f"step {i}: frames differ"
        assert x[1:] == y[1:], f"step {i}: {x[1:]} != {y[1:]}"


def _right_a_with_noise(n, seed, buttons="simple"):
    rng = np.random.default_rng(seed)
    hold = ACTION_SETS[buttons].index(["right", "A"])
    return np.where(rng.random(n) < 0.15, rng.integers(0, len(ACTION_SETS[buttons]), n), hold)


@pytest.mark.parametrize("jump_release", [True, False])
def test_a_mario_episode_from_a_saved_state_is_the_one_its_prefix_reaches(jump_release):
    cfg = EnvConfig(name="mario", options={"mario": MarioOptions(jump_release=jump_release)})
    assert entry_for(cfg).states
    actions = _right_a_with_noise(600, seed=3)
    env = make_env(cfg, 0)
    other = make_env(cfg, 1)  # a state restores on any env built alike
    try:
        env.reset()
        prefix = len(_play(env, actions)) // 2  # halfway through this episode
        assert prefix > 20
        env.reset()
        _play(env, actions[:prefix])
        state = env.save_state()
        assert isinstance(state, FrameState) and state.t == prefix and state.inner[-4:] != b""
        played = _play(env, actions[prefix:])
        assert played[-1][2] or played[-1][3]  # it ended (a death or a stall) after the state
        for target in (other, env, other):  # parked on the first restore, reset to its backup on the next
            frame = target.restore_state(state)
            assert np.array_equal(frame, state.frame)
            _assert_same(_play(target, actions[prefix:]), played)
        fresh = make_env(cfg, 2)
        try:  # and the true start is still the true start
            env.reset()
            fresh.reset()
            _assert_same(_play(env, actions[:40]), _play(fresh, actions[:40]))
        finally:
            fresh.close()
    finally:
        env.close()
        other.close()


def test_a_fake_episode_from_a_saved_state_is_the_one_its_prefix_reaches():
    cfg = EnvConfig(name="fake", frame_size=36, max_episode_steps=0)
    env, other = make_env(cfg, 7), make_env(cfg, 8)
    env.reset()
    _play(env, range(5))
    state = env.save_state()
    played = _play(env, np.arange(400) % 7)
    frame = other.restore_state(state)
    assert frame.reshape(-1)[:16].tobytes() == (state["count"] - 1).to_bytes(8, "little") + (7).to_bytes(8, "little")
    _assert_same(_play(other, np.arange(400) % 7), played)


def test_the_vector_env_starts_each_episode_where_starts_says():
    cfg = EnvConfig(name="fake", frame_size=36, max_episode_steps=3)  # every episode ends after 3 steps
    venv = make_vector_env(cfg, [1, 2])
    venv.reset()
    venv.step(np.zeros(2, np.int64))
    saved = venv.save_state(1)  # env 1 after one step (frame count 2: the reset frame, then one step's)
    asked: list[int] = []

    def starts(e):
        asked.append(e)
        return saved if e == 1 else None

    venv.starts = starts
    venv.step(np.zeros(2, np.int64))
    obs, *_ = venv.step(np.zeros(2, np.int64))  # both ended: env 0 at its true start, env 1 at the state
    assert asked == [0, 1]
    count = obs[:, 0, :8].copy().view("<u8")[:, 0]
    assert count[1] == 1 and count[0] == 4  # the state's frame again; a new episode's (counted since seeding)
    with pytest.raises(TypeError, match="FrameState"):
        make_env(EnvConfig(name="mario"), 0).restore_state(b"\x00")
