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
