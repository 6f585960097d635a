"""Training starts (actors/starts.py): death rates and staleness weight the hazard draw as written, the frontier keeps
the furthest states, half of the hazard starts carry one forced press, frontier starts a burst, and a run on the
fake env restores the states chosen (tests/integration/test_starts_run.py: a run's metrics)."""

import numpy as np
import pytest

from actors.starts import FRONTIER, HAZARD, KEEP, REUSE, STALENESS, TRUE, StartChooser
from shared.config import ActorConfig, EnvConfig, RunConfig
from shared.envs import make_vector_env
from shared.errors import ConfigError
from shared.resolution import resolve_config

HAZARDS = [("a", 0.0, 100.0), ("b", 100.0, 200.0), ("c", 200.0, 300.0)]


class Env:
    """Saves the step it is at: enough to tell states apart (the chooser never looks inside one)."""

    def __init__(self):
        self.t = 0

    def save_state(self, e):
        return (e, self.t)


def play(chooser, env, scores, success=False, e=0):
    """Env ``e`` plays one episode through ``scores`` (one per step) and ends; returns where the finished one started."""
    for score in scores:
        env.t += 1
        chooser.stepped(env, np.array([score]), np.array([True]))
    return chooser.ended(np.array([e]), np.array([scores[-1]]), np.array([success]))


def chooser(share=1.0, frontier_share=0.0, lead=8, every=4, burst=5, seed=0, hazards=HAZARDS):
    return StartChooser(1, np.random.default_rng(seed), share, lead, frontier_share, burst, hazards, every=every)


def test_death_rates_are_ends_in_a_cluster_over_episodes_that_reached_it_and_weight_the_draw_as_written():
    c, env = chooser(), Env()
    for _ in range(4):
        play(c, env, list(np.linspace(10, 150, 40)))  # dies in b
    play(c, env, list(np.linspace(10, 50, 40)))  # dies in a
    for _ in range(5):
        play(c, env, list(np.linspace(10, 320, 40)), success=True)  # the flag: no state kept
    rates = c.death_rates()
    assert rates == pytest.approx({0: 1 / 10, 1: 4 / 9})  # b reached by 9 of 10 (the one dying in a did not)
    assert sorted(c.pools) == [0, 1] and len(c.pools[1]) == KEEP and len(c.pools[0]) == 1
    clusters, p = c.weights()
    death = np.array([0.1, 4 / 9]) + 1e-3
    stale = np.array([1.0, 1.0])  # neither drawn yet
    assert clusters == [0, 1]
    np.testing.assert_allclose(p, (1 - STALENESS) * death / death.sum() + STALENESS * stale / stale.sum())

    c.starts, c.drawn_at = 10, {1: 10}  # b drawn at the tenth start, a never: a is staler
    _, p = c.weights()
    stale = np.array([11.0, 0.0])
    np.testing.assert_allclose(p, (1 - STALENESS) * death / death.sum() + STALENESS * stale / stale.sum())


def test_a_hazard_start_is_a_state_lead_steps_before_a_recent_end():
    c, env = chooser(lead=8, every=4), Env()
    play(c, env, [float(x) for x in range(100, 140)])  # 40 steps, dies at 139 (cluster b)
    (saved,) = c.pools[1]
    assert saved.state[1] in (env.t - 8, env.t - 9, env.t - 10, env.t - 11)  # 8 to 8 + every - 1 steps before the end
    assert c.choose(0) == saved.state
    assert play(c, env, [150.0, 151.0]) == [TRUE]  # the finished episode had begun at the true start ...
    assert c.kind[0] == HAZARD and c.start_score[0] == saved.score  # ... and the next at the state


def test_a_kept_state_serves_reuse_starts_before_a_newer_death_replaces_it():
    c, env = chooser(), Env()
    for _ in range(KEEP):
        play(c, env, [float(x) for x in range(100, 140)])
    kept = [s.state for s in c.pools[1]]
    play(c, env, [float(x) for x in range(100, 140)])
    assert [s.state for s in c.pools[1]] == kept  # full, none used yet: the newest death waits
    for _ in range(REUSE):
        c.pools[1][0].uses += 1
    play(c, env, [float(x) for x in range(100, 140)])
    assert c.pools[1][0].state not in kept and c.pools[1][1].state == kept[1]  # the worn one replaced


def test_half_of_the_hazard_starts_carry_one_forced_press_within_the_lead_and_it_is_taken_at_epsilon_one():
    c, env = chooser(lead=8), Env()
    play(c, env, [float(x) for x in range(100, 140)])
    forced = []
    for _ in range(400):
        c.choose(0)
        c.ended(np.array([0]), np.array([139.0]), np.array([False]))
        forced.append(int(c.force_at[0]))
    forced = np.array(forced)
    assert 0.4 < (forced >= 0).mean() < 0.6
    assert set(forced[forced >= 0].tolist()) == set(range(8))
    c.force_at[0], c.steps[0] = 3, 0
    eps = np.array([0.05])
    for step in range(6):
        assert c.epsilon(eps)[0] == (1.0 if step == 3 else 0.05)
        env.t += 1
        c.stepped(env, np.array([500.0 + step]), np.array([True]))


def test_the_frontier_keeps_the_furthest_states_and_a_frontier_start_explores_for_its_burst():
    c, env = chooser(frontier_share=1.0, burst=5), Env()
    for end in (300.0, 900.0, 500.0, 700.0, 800.0, 200.0):
        play(c, env, list(np.linspace(0, end, 60)))
    assert len(c.frontier) == KEEP
    assert [s.score for s in c.frontier] == sorted((s.score for s in c.frontier), reverse=True)
    for saved, end in zip(c.frontier, (900, 800, 700, 500)):  # the four furthest episodes', 8 to 11 steps before their ends
        step = end / 59
        assert end - 12 * step < saved.score < end - 7 * step, (saved.score, end)
    state = c.choose(0)
    assert state in [s.state for s in c.frontier]
    play(c, env, [1.0, 2.0])
    assert c.kind[0] == FRONTIER
    eps = np.array([0.05])
    seen = []
    for step in range(8):
        seen.append(float(c.epsilon(eps)[0]))
        env.t += 1
        c.stepped(env, np.array([1000.0 + step]), np.array([True]))
    assert seen == [1.0] * 5 + [0.05] * 3


def test_no_share_means_the_true_start_and_an_env_without_states_refuses_a_share():
    c, env = chooser(share=0.0), Env()
    play(c, env, [float(x) for x in range(100, 140)])
    assert all(c.choose(0) is None for _ in range(50))
    with pytest.raises(ConfigError, match=r"actor.start_share=0.5: env 'snake' cannot save its state"):
        resolve_config(RunConfig(env=EnvConfig(name="snake"), actor=ActorConfig(start_share=0.5)))
    with pytest.raises(ConfigError, match=r"actor.start_share=1.5"):
        resolve_config(RunConfig(env=EnvConfig(name="fake"), actor=ActorConfig(start_share=1.5)))


def test_the_vector_env_restores_the_chosen_state():
    venv = make_vector_env(EnvConfig(name="fake", frame_size=36, max_episode_steps=20), [3])
    venv.reset()
    c = chooser(lead=4, every=2, hazards=None)
    venv.starts = c.choose
    kinds = []
    for _ in range(200):
        _, _, term, trunc, info = venv.step(np.zeros(1, np.int64))
        done = term | trunc
        if done.any():
            kinds += c.ended(np.flatnonzero(done), info["score"][done], info["success"][done]).tolist()
        c.stepped(venv, info["score"], ~done)
    assert kinds[0] == TRUE and HAZARD in kinds  # the first from the true start, then states of its own play
