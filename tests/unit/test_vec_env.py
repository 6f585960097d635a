"""Every env as a vector env with its spec (shared/envs/): specs from the config alone, and the frame
envs' wrapper steps its single envs exactly as they step alone (same-step auto-reset, fresh arrays)."""

import numpy as np
import pytest

from shared.config import ConfigError, EnvConfig
from shared.envs import env_spec, make_env, make_vector_env
from shared.envs.frames import FrameVectorEnv
from shared.envs.fuelbreak import FuelbreakOptions
from shared.envs.mario import MarioOptions
from shared.envs.snake import SnakeOptions
from shared.spec import EnvSpec, VectorEnv
from shared.wire.protocol import action_dtype


def test_specs_of_every_env():
    assert env_spec(EnvConfig(name="fake")) == EnvSpec((84, 84), "uint8", 4, 7, False)
    assert env_spec(EnvConfig(name="catch", frame_size=42, stack=2)) == EnvSpec((42, 42), "uint8", 2, 3, False)
    assert env_spec(EnvConfig(name="mario", options={"mario": MarioOptions(actions="complex")})) == EnvSpec(
        (84, 84), "uint8", 4, 12, False
    )
    assert env_spec(EnvConfig(name="snake")) == EnvSpec((14,), "float32", 1, 3, False)
    assert env_spec(EnvConfig(name="snake", options={"snake": SnakeOptions(obs="grid", size=6)})) == EnvSpec(
        (3, 6, 6), "uint8", 1, 3
    )
    assert env_spec(EnvConfig(name="fuelbreak")) == EnvSpec((8, 32, 32), "uint8", 1, 1024, True)
    with pytest.raises(ConfigError, match="env.fuelbreak.budget=0"):
        env_spec(EnvConfig(name="fuelbreak", options={"fuelbreak": FuelbreakOptions(budget=0)}))


def test_action_dtype():
    assert action_dtype(7) == np.uint8 and action_dtype(256) == np.uint8 and action_dtype(1024) == np.dtype("<u2")
    with pytest.raises(ValueError, match="num_actions 70000"):
        action_dtype(70000)


@pytest.mark.parametrize("name", ["snake", "fuelbreak", "fake"])
def test_vector_envs_follow_their_spec(name):
    cfg = EnvConfig(
        name=name, frame_size=36, options={"snake": SnakeOptions(size=6), "fuelbreak": FuelbreakOptions(size=8, budget=3)}
    )
    env = make_vector_env(cfg, [11, 12, 13])
    spec = env_spec(cfg)
    assert isinstance(env, VectorEnv) and env.spec == spec and env.num_envs == 3
    obs = env.reset()
    assert obs.shape == (3, *spec.obs_shape) and obs.dtype == spec.obs_dtype
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = env.action_mask()
        assert mask.shape == (3, spec.num_actions) and mask.any(1).all()
        actions = np.where(mask, rng.random(mask.shape), -1).argmax(1)
        obs, reward, term, trunc, info = env.step(actions)
        assert obs.shape == (3, *spec.obs_shape) and obs.dtype == spec.obs_dtype
        assert reward.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
        assert info["score"].shape == (3,) and info["success"].dtype == bool
    env.close()


def test_frame_vector_env_steps_like_its_single_envs():
    cfg = EnvConfig(name="fake", frame_size=36, max_episode_steps=20)
    vec = make_vector_env(cfg, [5, 6])
    assert isinstance(vec, FrameVectorEnv)
    singles = [make_env(cfg, seed=5), make_env(cfg, seed=6)]
    obs = vec.reset()
    for e, env in enumerate(singles):
        assert np.array_equal(obs[e], env.reset())
    ends = 0
    for t in range(120):
        actions = np.array([t % 7, (3 * t) % 7])
        obs2, reward, term, trunc, info = vec.step(actions)
        assert obs2 is not obs and not np.shares_memory(obs2, obs)  # fresh arrays
        for e, env in enumerate(singles):
            frame, r, te, tr, inf = env.step(int(actions[e]))
            assert reward[e] == np.float32(r) and term[e] == te and trunc[e] == tr
            assert info["score"][e] == inf["score"] and info["success"][e] == inf["success"]
            if te or tr:
                ends += 1
                frame = env.reset()
            assert np.array_equal(obs2[e], frame)
        obs = obs2
    assert ends >= 4
