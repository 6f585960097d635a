"""Issue 11: Snake and fuel breaks through real actor processes and real ZeroMQ sockets into the replay.

What the replay holds equals what the env produced: each test replays the actions the replay stored on a
fresh vector env built with the actor's seeds (the envs are deterministic given seed and actions) and
compares every slot's observation, reward, flags and, for fuel breaks, action mask, byte for byte."""

import numpy as np
import pytest
import torch

from actors.collector import env_seed
from learner.data_plane import DataPlane
from shared.vec_env import env_spec, make_vector_env
from tests.test_data_plane import run_actors


def replay_matches_env(cfg, plane, batches):
    """Step a reference vector env with the stored actions; every stored slot must equal what it produced."""
    spec, replay = env_spec(cfg.env), plane.replay
    n_env, n = cfg.actor.envs_per_actor, batches * cfg.actor.batch_steps
    assert list(replay.heads) == [n] * n_env and plane.stats().rejected == 0
    env = make_vector_env(cfg.env, [env_seed(cfg.actor.seed, 0, e) for e in range(n_env)])
    obs, first, ends, episodes = env.reset(), np.ones(n_env, bool), 0, []
    mask = env.action_mask() if spec.masked else None
    for k in range(n):
        slots = [replay.slot_data(e, k) for e in range(n_env)]
        actions = np.array([s["action"] for s in slots])
        for e, s in enumerate(slots):
            assert s["frame"].numpy().dtype == np.dtype(spec.obs_dtype)
            assert np.array_equal(s["frame"].numpy(), obs[e]), f"env {e} slot {k}: observation differs"
            assert np.array_equal(replay.stack_at(e, k).numpy(), obs[e])  # stack 1: the input is the observation
            assert s["first"] == first[e], f"env {e} slot {k}: first flag"
            if spec.masked:
                assert np.array_equal(s["mask"].numpy(), mask[e]), f"env {e} slot {k}: action mask differs"
                assert mask[e, s["action"]], "the actor took an invalid action"
        obs, reward, term, trunc, info = env.step(actions)
        for e, s in enumerate(slots):
            assert s["reward"] == reward[e] and s["terminated"] == term[e], f"env {e} slot {k}: reward/terminated"
        first = term | trunc
        ends += int(first.sum())
        episodes += [(float(info["score"][e]), bool(info["success"][e])) for e in np.flatnonzero(first)]
        if spec.masked:
            mask = env.action_mask()
    env.close()
    return ends, episodes


def run_through_plane(cfg, batches: int) -> DataPlane:
    """Real actor processes send ``batches`` batches each over real sockets into a DataPlane; its replay after."""
    plane = DataPlane(cfg, env_spec(cfg.env).num_actions, torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=batches)
        assert plane.wait_for(reports[0]["sent_transitions"], timeout=30)
    finally:
        plane.close()
    return plane


@pytest.mark.timeout(180)
def test_snake_transitions_arrive_exactly(make_config):
    cfg = make_config(actors=1, envs=16, steps=32, env="snake", capacity=16 * 320, snake_size=6)
    cfg.replay.prioritized = True  # actor priorities travel too
    plane = run_through_plane(cfg, 8)
    assert plane.replay.obs_dtype == torch.float32 and plane.replay.frame_shape == (14,)
    ends, episodes = replay_matches_env(cfg, plane, 8)
    assert ends >= 16 and plane.episodes_total == ends  # episodes cross batch boundaries, all were reported
    window = np.array(plane.episodes)  # the learner keeps the newest 100, in the order the actor finished them
    assert np.array_equal(window[:, 1:], np.array(episodes, np.float32)[-len(window):])


@pytest.mark.timeout(180)
def test_fuelbreak_transitions_and_masks_arrive_exactly(make_config):
    cfg = make_config(actors=1, envs=4, steps=8, env="fuelbreak", capacity=4 * 64, fuelbreak_size=16,
                      fuelbreak_budget=5)
    plane = run_through_plane(cfg, 6)
    assert plane.replay.masked and plane.replay.num_actions == 256
    ends, episodes = replay_matches_env(cfg, plane, 6)
    assert ends == 4 * (48 // 5)  # every episode ends at its budget
    assert plane.episodes_total == ends
    assert np.array_equal(np.array(plane.episodes)[:, 1:], np.array(episodes, np.float32))  # score, success


@pytest.mark.timeout(120)
def test_fuelbreak_with_1024_actions_sends_uint16_actions(make_config):
    """The default 32x32 landscape: 1,024 actions travel as uint16 and stay exact in replay."""
    cfg = make_config(actors=1, envs=2, steps=8, env="fuelbreak", capacity=2 * 40, fuelbreak_budget=6)
    plane = run_through_plane(cfg, 2)
    assert plane.replay._actions.dtype == torch.int16
    ends, _ = replay_matches_env(cfg, plane, 2)
    assert ends == 2 * (16 // 6)


def test_evaluation_plays_vector_envs_greedy_and_random():
    """actors/evaluator.py on Snake and fuel breaks: one episode per env, scores from info, valid actions only."""
    from actors.evaluator import action_names_for, build_network, play_episodes, summarize
    from learner.loop import format_eval_line
    from shared.config import EnvConfig

    fuel = EnvConfig(name="fuelbreak", fuelbreak_size=12, fuelbreak_budget=4)
    episodes = play_episodes(build_network(fuel), fuel, 5, 0.0, seed=3)
    assert [e.length for e in episodes] == [4] * 5 and all(e.x_pos >= 0 for e in episodes)
    assert all(len(set(e.actions.tolist())) == 4 for e in episodes)  # a cell never takes two breaks
    snake = EnvConfig(name="snake", snake_size=6)
    names = action_names_for(snake)
    random = play_episodes(None, snake, 12, 1.0, seed=1, policy="random")
    again = play_episodes(None, snake, 12, 1.0, seed=1, policy="random")
    assert [e.x_pos for e in random] == [e.x_pos for e in again] and len(random) == 12  # seeded
    summary = summarize(random, 3, names)
    assert summary["score_mean"] == summary["x_pos_mean"] and summary["success_rate"] == summary["flag_rate"]
    line = format_eval_line(dict(env_steps=1000, weights_version=2, epsilon=0.05, seconds=1.0, summary=summary,
                                 random=summary))
    assert "score mean" in line and "random policy: score mean" in line
