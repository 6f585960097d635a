"""Snake learns through the whole distributed pipeline on the shipped defaults: launch.local with its 4 actor
processes, real sockets, weight broadcast, prioritized replay with actor priorities, the MLP on flood-fill
features, the learner. Only the budget (UPDATES learner updates) and the seed (0) are set (and the run folder and
ports), and the replay ratio is held at 2.5 samples per transition (exact ratio), so the run learns from about 77K
transitions whether the test runs alone or beside another (capped, the suite's load decided: 41K in CI, greedy 2.00
against a bar of 2.11; held at 2.5, 13.45, 13.71 and 14.30). The grid is the default 10x10. A budget in updates,
not seconds.

The final checkpoint's greedy policy (epsilon 0) then plays 100 episodes, one per env of one vector env, and a
uniformly random policy 100 more on the same seeds: food eaten per episode. The bar: greedy at least 2 food above
random and at least 4x random, which a pipeline that does not learn cannot reach: the same bar is checked to fail
for the untrained network. Measured figures: docs/testing.md, docs/lab/testing-log.md.
"""

import pytest
import torch

from learner.checkpoint import load_checkpoint
from shared.config_migration import read_config
from shared.envs import options
from shared.envs.snake import SnakeOptions
from shared.evaluation.episodes import build_network
from tests.support.learning import clears_bar, mean_score, train_on_defaults

UPDATES = 3_000
SAMPLES_PER_INSERT = 2.5  # held (exact ratio): about 77K transitions whatever else the machine runs
EPISODES = 100
SEED = 777  # the 100 episodes' seed, the same for greedy, random and untrained
SNAKE_BAR = (2.0, 4.0)  # greedy mean food must beat random by at least 2 food and by 4x


@pytest.mark.slow  # minutes: scheduled first (tests/conftest.py)
@pytest.mark.timeout(1200)  # a hang guard: the run ends on its update budget
def test_snake_learns_end_to_end_on_defaults(tmp_path, record_property):
    out, run = train_on_defaults(
        tmp_path,
        "snake",
        "--learner.steps",
        str(UPDATES),
        "--learner.exact-ratio",
        "--learner.samples-per-insert",
        str(SAMPLES_PER_INSERT),
        timeout=1100,
    )
    assert "on snake (obs float32 14, stack 1, 3 actions, mlp net)" in out, out[:2000]
    state = load_checkpoint(run)
    cfg = read_config(state["config"])
    assert options(cfg.env, "snake", SnakeOptions).size == 10 and state["counters"]["updates"] == UPDATES
    net = build_network(cfg.env, state["learner"]["online"])
    greedy, random = (mean_score(n, cfg.env, policy, EPISODES, SEED) for n, policy in ((net, "greedy"), (None, "random")))
    torch.manual_seed(cfg.learner.seed)  # the learner's initial network (learner/trainer.py seeds it so)
    untrained = mean_score(build_network(cfg.env), cfg.env, "greedy", EPISODES, SEED)
    figures = (
        f"Snake 10x10 after {state['counters']['updates']} updates, {state['counters']['inserted']:,} transitions: "
        f"greedy {greedy:.2f} food per episode, random {random:.2f}, untrained network {untrained:.2f}"
    )
    record_property("figures", figures)  # printed at the end of every run (tests/conftest.py)
    assert not clears_bar(untrained, random, SNAKE_BAR), f"the bar does not tell learning: untrained {untrained:.2f}"
    assert clears_bar(greedy, random, SNAKE_BAR), f"greedy {greedy:.2f} vs random {random:.2f}\n{out[-3000:]}"
