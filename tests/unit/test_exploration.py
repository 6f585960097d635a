"""shared/exploration.py: each env's epsilon annealing from 1 to its Ape-X floor, and random actions held for a
Zipf-distributed number of steps."""

import numpy as np
import pytest

from shared.config import ActorConfig
from shared.exploration import ExplorationHolds, epsilon_floors, epsilons, mean_floor


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


def test_exploration_holds_a_random_action_for_zipf_steps():
    rng = np.random.default_rng(0)
    holds = ExplorationHolds(ActorConfig(explore_repeat=2.0, explore_repeat_max=10), 2000, 7, rng)
    eps = np.ones(2000)
    first = holds.step(eps)
    assert first.all()  # epsilon 1: every env starts a hold at once
    lengths, actions = holds.left + 1, holds.action.copy()
    assert lengths.min() == 1 and lengths.max() == 10
    assert 0.55 < (lengths == 1).mean() < 0.67  # Zipf(2): P(n=1) = 1/zeta(2) = 0.61
    assert set(np.unique(actions)) == set(range(7))
    held = lengths > 1
    again = holds.step(np.zeros(2000))  # epsilon 0 now: only the envs still holding explore, with the same action
    assert np.array_equal(again, held) and np.array_equal(holds.action[held], actions[held])
    holds.clear(int(np.flatnonzero(held)[0]))
    assert holds.left[np.flatnonzero(held)[0]] == 0
    plain = ExplorationHolds(ActorConfig(explore_repeat=0.0), 1000, 7, rng)
    assert plain.step(np.ones(1000)).all() and (plain.left == 0).all()  # off: one step per random action
    assert not plain.step(np.zeros(1000)).any()
