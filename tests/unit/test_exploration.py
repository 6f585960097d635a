"""shared/exploration.py: each env's epsilon annealing from 1 to its Ape-X floor over its share of the run's anneal."""

import numpy as np
import pytest

from shared.config import ActorConfig
from shared.exploration import epsilon_floors, epsilons, mean_floor


def test_exploration_anneals_from_one_to_each_envs_floor():
    cfg = ActorConfig(envs_per_actor=1, eps_anneal_env_steps=4000)  # 1,000 steps of each env of 4 actors of one
    floors = np.concatenate([epsilon_floors(cfg, 4, a) for a in range(4)])
    assert floors[0] == pytest.approx(0.4)
    assert floors[1] == floors[2] == floors[3] == pytest.approx(0.05)  # Ape-X gives 0.047, 0.0056, 0.00066: floored
    low = np.concatenate([epsilon_floors(ActorConfig(envs_per_actor=1, eps_min=0.01), 4, a) for a in range(4)])
    assert low[1] == pytest.approx(0.4 ** (1 + 7 / 3)) and low[2] == low[3] == pytest.approx(0.01)
    for a in range(4):
        assert epsilons(cfg, 4, a, 0) == pytest.approx(1.0)
        assert epsilons(cfg, 4, a, 500)[0] == pytest.approx((1 + floors[a]) / 2)
        assert epsilons(cfg, 4, a, 5000)[0] == pytest.approx(floors[a])
    assert mean_floor(cfg, 4) == pytest.approx(floors.mean())
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_env_steps=0, epsilon=0.2), 4, 3, 0)[0] == 0.2  # fixed
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_env_steps=0), 4, 0, 0)[0] == pytest.approx(0.4)


POINTS = ((0, 1.0), (20_000, 0.8), (50_000, 0.5), (100_000, 0.0), (300_000, 0.0))
"""(the run's env steps, the share of each env's anneal still left): each a whole number of steps of each of 16 envs."""


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--actors", "2"],
        ["--actors", "8"],
        ["--actors", "2", "--actor.envs-per-actor", "2"],
        ["--actors", "8", "--actor.envs-per-actor", "2"],
    ],
)
def test_the_anneal_spends_the_same_share_of_the_budget_however_many_envs_share_it(argv):
    """Issue 85 item 4: the anneal counts the run's env steps, split over actors x envs_per_actor, so --actors and
    --actor.envs-per-actor change each env's figure, not the run's: every env is at the same point of its schedule
    after the same share of the run's transitions."""
    from launch.cli import parse_run_config
    from shared.exploration import anneal_steps_per_env
    from shared.resolution import resolve_config

    cfg = resolve_config(parse_run_config(argv))  # Mario: a 300K budget
    envs = cfg.actors * cfg.actor.envs_per_actor
    assert cfg.actor.eps_anneal_env_steps == 100_000 and cfg.total_env_steps == 300_000  # a third of the budget
    assert anneal_steps_per_env(cfg.actor, cfg.actors) * envs == pytest.approx(100_000)
    for actor_id in range(cfg.actors):
        floors = epsilon_floors(cfg.actor, cfg.actors, actor_id)
        for run_steps, left in POINTS:
            got = epsilons(cfg.actor, cfg.actors, actor_id, run_steps // envs)  # each env's share of the run's steps
            np.testing.assert_allclose(got, floors + (1 - floors) * left, rtol=0, atol=1e-12)


def test_the_default_run_anneals_each_env_over_25000_of_its_steps_as_before():
    """4 actors of one env: each env's schedule is the one it had when the option counted each env's steps, bit for bit
    (fuel breaks' 4 x 32 envs: 1,000 steps each)."""
    from launch.local import anneal_phrase
    from shared.config import EnvConfig, RunConfig
    from shared.exploration import anneal_steps_per_env
    from shared.resolution import resolve_config

    cfg = resolve_config(RunConfig())
    assert (cfg.actors, cfg.actor.envs_per_actor, anneal_steps_per_env(cfg.actor, cfg.actors)) == (4, 1, 25_000)
    for actor_id in range(4):
        floors = epsilon_floors(cfg.actor, 4, actor_id)
        for steps in (0, 1, 7, 12_345, 24_999, 25_000, 25_001, 90_000):
            before = floors + (1.0 - floors) * max(0.0, 1.0 - steps / 25_000)  # the per-env schedule's arithmetic
            assert epsilons(cfg.actor, 4, actor_id, steps).tolist() == before.tolist()
    fuel = resolve_config(RunConfig(env=EnvConfig(name="fuelbreak")))
    assert anneal_steps_per_env(fuel.actor, fuel.actors) == 1_000
    said = anneal_phrase(cfg)  # the header names the run's figure, its share of the budget and each env's
    assert "over 100,000 env steps of the run, 33% of the budget: 25,000 steps of each of its 4 envs" in said, said


def test_epsilon_greedy_explores_by_its_own_draws_and_exploits_the_valid_argmax():
    from shared.exploration import EpsilonGreedy

    q = np.array([[0.0, 5.0, 1.0], [9.0, 2.0, 3.0], [1.0, 2.0, 7.0], [4.0, 0.0, 8.0]], np.float32)
    mask = np.array([[1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
    eps = np.array([0.0, 0.3, 1.0, 0.6])
    asked = []
    actions, got = EpsilonGreedy(np.random.default_rng(7), 3).choose(eps, lambda: asked.append(1) or q, mask)
    rng = np.random.default_rng(7)  # the same draws by hand: who explores, a uniform action, the valid redraw
    explore = rng.random(4) < eps
    rows = np.flatnonzero(explore)
    rng.integers(3, size=len(rows))
    redrawn = np.where(mask[rows], rng.random((len(rows), 3)), -1.0).argmax(1)
    expected = np.where(mask, q, -np.inf).argmax(1)  # 1, 2 (0 is masked), 2, 0 (2 is masked)
    expected[rows] = redrawn
    assert expected[:1].tolist() == [1] and explore[2] and not explore[0]
    assert actions.tolist() == expected.tolist() and got is q and asked == [1]
    assert mask[np.arange(4), actions].all()


def test_epsilon_greedy_draws_nothing_when_every_env_is_greedy_or_random_and_asks_no_q_when_all_explore():
    from shared.exploration import EpsilonGreedy

    rng = np.random.default_rng(3)
    policy = EpsilonGreedy(rng, 4)
    q = np.array([[0.0, 1.0, 3.0, 2.0]] * 2)
    before = rng.bit_generator.state
    assert policy.choose(np.zeros(2), lambda: q)[0].tolist() == [2, 2]
    assert rng.bit_generator.state == before  # greedy: no draw at all
    actions, got = policy.choose(np.ones(2), lambda: pytest.fail("Q asked while every env explores"))
    assert got is None and actions.tolist() == np.random.default_rng(3).integers(4, size=2).tolist()


def test_no_module_but_exploration_draws_its_own_epsilon_greedy_choice():
    import pathlib
    import re

    from tests.support.paths import ROOT

    draw = re.compile(r"<\s*(self\.)?eps(ilon)?\b")  # a uniform draw compared with an epsilon (the old copies' form too)
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("actors", "learner", "shared", "launch")
        for path in sorted(pathlib.Path(ROOT, package).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if draw.search(line)
    ]
    assert [f.split(":")[0] for f in found] == ["shared/exploration.py"], found  # EpsilonGreedy.choose's draw alone
