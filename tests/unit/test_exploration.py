"""shared/exploration.py: each env's epsilon annealing from 1 to its Ape-X floor."""

import numpy as np
import pytest

from shared.config import ActorConfig
from shared.exploration import epsilon_floors, epsilons, mean_floor


def test_exploration_anneals_from_one_to_each_envs_floor():
    cfg = ActorConfig(envs_per_actor=1, eps_anneal_steps=1000)  # one env per actor (the auto 0 is RunConfig's to resolve)
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
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_steps=0, epsilon=0.2), 4, 3, 0)[0] == 0.2  # fixed
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_steps=0), 4, 0, 0)[0] == pytest.approx(0.4)


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
