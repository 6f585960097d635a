"""Tests for shared/envs/gymnasium_env.py: Gymnasium envs through the adapter (``--env.name gym``): CartPole-v1's spec
and the same-step auto-reset contract, the errors that name a bad value, and a tiny image env of the test's own
through the frame preprocessing and stack."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")  # an optional dependency (setup.cfg's gym extra; the dev extra has it)

from shared.config import EnvConfig  # noqa: E402
from shared.envs import action_names, check_env, entry_for, env_spec, make_vector_env, names  # noqa: E402
from shared.envs.gymnasium_env import GymOptions, GymVectorEnv, describe  # noqa: E402
from shared.errors import ConfigError  # noqa: E402
from shared.evaluation.episodes import play_episodes  # noqa: E402
from shared.network import build_q_network  # noqa: E402
from shared.spec import EnvSpec, VectorEnv  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402
from tests.support.runs import free_base_port  # noqa: E402

TINY_ID = "WarppipeTinyImage-v0"


class TinyImageEnv(gymnasium.Env):
    """A 20x30 RGB screen with one lit column (the state), 3 actions (left, stay, right); reward 1 per step on the
    middle column, terminated when the column leaves the screen, truncated after ``limit`` steps;
    ``info["is_success"]`` on the last column. ``gray``: a (H, W) observation instead."""

    H, W = 20, 30

    def __init__(self, limit: int = 12, gray: bool = False):
        shape = (self.H, self.W) if gray else (self.H, self.W, 3)
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.limit, self.gray = limit, gray

    def _obs(self) -> np.ndarray:
        screen = np.zeros((self.H, self.W, 3), np.uint8)
        screen[:, self.col * 3 : self.col * 3 + 3] = 255
        return screen[:, :, 0].copy() if self.gray else screen

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.col, self.t = int(self.np_random.integers(3, 7)), 0
        return self._obs(), {}

    def step(self, action):
        self.col += int(action) - 1
        self.t += 1
        terminated = not 0 <= self.col < 10
        self.col = min(max(self.col, 0), 9)
        truncated = self.t >= self.limit
        return self._obs(), float(self.col == 5), terminated, truncated, {"is_success": self.col == 9}


gymnasium.register(TINY_ID, entry_point=TinyImageEnv)


def gym_cfg(env_id: str = "CartPole-v1", kwargs: str = "{}", **fields) -> EnvConfig:
    return EnvConfig(name="gym", options={"gym": GymOptions(id=env_id, kwargs=kwargs)}, **fields)


def test_registered_under_gym_with_its_options():
    assert "gym" in names() and entry_for("gym").options_type is GymOptions
    _, cfg = check_env(gym_cfg())
    assert cfg.max_episode_steps == 0  # auto: only the env's own time limit
    assert entry_for("gym").options is not None and entry_for("gym").options(cfg) == "CartPole-v1"


def test_cartpole_spec_is_float32_features_unstacked():
    cfg = gym_cfg(stack=4)  # env.stack is for frames: a vector observation is never stacked
    assert env_spec(cfg) == EnvSpec((4,), "float32", 1, 2, False)
    assert action_names(cfg) == ["0", "1"]
    env = make_vector_env(cfg, [3, 4, 5])
    assert isinstance(env, VectorEnv) and env.spec == env_spec(cfg) and env.num_envs == 3
    obs = env.reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    assert env.action_mask().shape == (3, 2) and env.action_mask().all()
    env.close()
    env.close()  # idempotent


def test_cartpole_auto_resets_on_the_same_step_and_the_score_starts_over():
    env = make_vector_env(gym_cfg(), [7])
    reference = gymnasium.make("CartPole-v1")
    first, _ = reference.reset(seed=7)
    obs = env.reset()
    np.testing.assert_allclose(obs[0], first)  # env e's first reset takes seeds[e]
    ends, step, returns = 0, 0, 0.0
    while ends < 3:
        obs, reward, term, trunc, info = env.step(np.array([1]))  # always right: the pole falls within a few dozen steps
        step += 1
        returns += float(reward[0])
        assert reward.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
        assert info["score"].dtype == np.float64 and info["success"].dtype == bool
        assert not (term[0] and trunc[0])
        assert info["score"][0] == returns  # the episode's summed reward so far
        if term[0] or trunc[0]:
            ends += 1
            assert term[0] and not info["success"][0]  # CartPole gives no is_success: never a success
            # the row is the next episode's first: the pole stands up straight again (|state| < 0.05 after a reset)
            assert np.all(np.abs(obs[0]) < 0.05), obs
            returns = 0.0
        else:
            assert step < 600, "CartPole never ended"
    obs, reward, _, _, info = env.step(np.array([0]))
    assert info["score"][0] == reward[0] == 1.0  # the score started over with the new episode
    env.close()


def test_episode_cap_truncates_and_terminated_wins_over_truncated():
    env = make_vector_env(gym_cfg(max_episode_steps=5), [0])
    env.reset()
    outs = [env.step(np.array([t % 2])) for t in range(5)]  # alternating: the pole stays up for 5 steps
    assert [bool(o[3][0]) for o in outs] == [False] * 4 + [True] and not any(bool(o[2][0]) for o in outs)
    env.close()

    class Both(gymnasium.Env):  # an env that ends with terminated and truncated both True
        observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gymnasium.spaces.Discrete(2, start=1)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            assert action in (1, 2), action  # the Discrete space's start is added to warppipe's 0-based actions
            return np.ones(2, np.float32), 2.0, True, True, {"is_success": True}

    spec = EnvSpec((2,), "float32", 1, 2)
    vec = GymVectorEnv([Both()], spec, start=1, seeds=[0])
    vec.reset()
    obs, reward, term, trunc, info = vec.step(np.array([1]))
    assert (bool(term[0]), bool(trunc[0]), bool(info["success"][0]), float(info["score"][0])) == (True, False, True, 2.0)
    assert np.all(obs[0] == 0)  # the next episode's first observation
    with pytest.raises(ValueError, match="out of range"):
        vec.step(np.array([2]))
    with pytest.raises(RuntimeError, match="before reset"):
        GymVectorEnv([Both()], spec, start=1, seeds=[0]).step(np.array([0]))


def test_bad_values_are_named():
    with pytest.raises(ConfigError, match="env.gym.id='' must name a registered Gymnasium env"):
        env_spec(gym_cfg(""))
    with pytest.raises(ConfigError, match=r"env.gym.id='NoSuchEnv-v9' is not a registered Gymnasium env \("):
        env_spec(gym_cfg("NoSuchEnv-v9"))
    with pytest.raises(ConfigError, match=r"env.gym.kwargs='\[1, 2\]' must be a JSON object"):
        env_spec(gym_cfg(kwargs="[1, 2]"))
    with pytest.raises(ConfigError, match=r"env.gym.kwargs='\{nope' must be a JSON object"):
        env_spec(gym_cfg(kwargs="{nope"))
    with pytest.raises(ConfigError, match=r"env.gym.kwargs='\{\"colour\": 1\}' are not keywords 'CartPole-v1' takes"):
        env_spec(gym_cfg(kwargs=json.dumps({"colour": 1})))
    # Pendulum: a continuous (Box) action space; Blackjack: a Tuple observation
    with pytest.raises(ConfigError, match=r"env.gym.id='Pendulum-v1' has action space Box\(.*Discrete one only"):
        env_spec(gym_cfg("Pendulum-v1"))
    with pytest.raises(ConfigError, match=r"env.gym.id='Blackjack-v1' has observation space Tuple\(.*image Box"):
        env_spec(gym_cfg("Blackjack-v1"))
    describe.cache_clear()


def test_an_ale_id_without_ale_py_says_to_install_it():
    try:
        import ale_py  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ale-py is installed here")
    with pytest.raises(ConfigError, match=r"env.gym.id='ALE/Pong-v5' needs ale-py: pip install ale-py"):
        env_spec(gym_cfg("ALE/Pong-v5"))


@pytest.mark.parametrize("gray", [False, True])
def test_an_image_env_goes_through_the_frame_preprocessing_and_stack(gray):
    cfg = gym_cfg(TINY_ID, json.dumps({"limit": 12, "gray": gray}), frame_size=36, stack=3, frame_skip=1)
    spec = env_spec(cfg)
    assert spec == EnvSpec((36, 36), "uint8", 3, 3, False)
    env = make_vector_env(cfg, [0, 1])
    obs = env.reset()
    assert obs.shape == (2, 36, 36) and obs.dtype == np.uint8
    assert obs.max() == 255 and obs.min() == 0  # the lit column, resized: a frame, not a blank
    total = np.zeros(2)
    ended = False
    for _ in range(12):
        obs, reward, term, trunc, info = env.step(np.array([1, 1]))  # stay: truncated at the env's own limit
        assert obs.shape == (2, 36, 36) and obs.dtype == np.uint8
        total += reward
        if trunc.any():
            ended = True
            assert trunc.all() and not term.any()
            np.testing.assert_array_equal(info["score"], total)  # the summed reward at the end
        else:
            np.testing.assert_array_equal(info["score"], total)
    assert ended
    for _ in range(8):  # right until the column leaves the screen: is_success on the way, terminated at the end
        obs, reward, term, trunc, info = env.step(np.array([2, 2]))
        if term.any():
            assert info["success"][term].all()
            break
    else:
        raise AssertionError("the column never left the screen")
    env.close()
    # an evaluation plays it with its stack, as the actors stack it (a vector env of stack 3)
    net = build_q_network(spec)
    episodes = play_episodes(net, cfg, episodes=2, epsilon=0.0, seed=0)
    assert len(episodes) == 2 and all(e.length >= 1 for e in episodes)


def test_cartpole_greedy_evaluation_runs():
    cfg = gym_cfg(max_episode_steps=20)
    net = build_q_network(env_spec(cfg))
    played = play_episodes(net, cfg, episodes=3, epsilon=0.0, seed=1)
    assert [e.length <= 20 for e in played] == [True] * 3 and all(e.score == e.ret for e in played)
    random = play_episodes(None, cfg, episodes=3, epsilon=1.0, seed=1, policy="random")
    assert len(random) == 3


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_local_trains_cartpole_briefly(tmp_path):
    """The plumbing: launch.local on CartPole-v1, one actor, a few thousand env steps, ends cleanly with a checkpoint."""
    cmd = [
        sys.executable,
        "-m",
        "launch.local",
        "--env.name",
        "gym",
        "--env.gym.id",
        "CartPole-v1",
        "--actors",
        "1",
        "--total-env-steps",
        "3000",
        "--learner.min-replay",
        "500",
        "--replay.capacity",
        "5000",
        "--eval.final-episodes",
        "0",
        "--seed",
        "0",
        "--transport.open-loopback",
        "--transport.base-port",
        str(free_base_port(4) + 2),
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "obs float32 4, stack 1, 2 actions, mlp net, CartPole-v1" in out, out[:3000]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    with open(run / "config.json", encoding="utf-8") as fh:
        env = json.load(fh)["env"]
    assert (env["name"], env["gym"]["id"], env["gym"]["kwargs"]) == ("gym", "CartPole-v1", "{}")
    assert "checkpoint.pt" in os.listdir(run), os.listdir(run)
