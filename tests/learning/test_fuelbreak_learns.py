"""Fuel breaks are learned through the whole distributed pipeline on the shipped defaults: launch.local with its
4 actor processes of 32 envs, real sockets, weight broadcast, prioritized replay, action masks on the wire and in
the Double-DQN target, the one-Q-per-cell network. Only the budget (UPDATES learner updates) and the seed (0) are
set (and the run folder and ports), and the replay ratio is held at 0.5 samples per transition (exact ratio), so
the run learns from about 192K transitions whether the test runs alone or beside another (capped, the suite's load
decided: 104K in CI, where a run scored 34.1 against the bar; held at 0.5, 54.4, 38.3 and 41.4). The landscape is
the default 32x32 with a budget of 16 breaks and 1 to 3 ignitions. A budget in updates, not seconds.

The last checkpoint's greedy policy (epsilon 0, argmax over valid cells) then places its 16 breaks on 100
held-out episodes (landscapes, winds and ignitions drawn from seed 777, which no actor env uses), and uniformly
random valid placements do the same on the same 100 episodes: cells saved against the same fire without breaks.
The bar: greedy saves at least 2.25x the cells random placements save, and at least 20 cells more per episode. An
untrained cell network already places breaks better than random (its local features see the fire: 6 to 44 cells
for init seeds 0-5 against random's 16), so the bar is checked to fail for the network this run starts from
(--seed 0: learner seed 0). Measured figures: docs/testing.md, docs/lab/testing-log.md.
"""

import pytest
import torch

from learner.checkpoint import load_checkpoint
from shared.config_migration import read_config
from shared.envs import options
from shared.envs.fuelbreak import FuelbreakOptions
from shared.evaluation.episodes import build_network
from tests.support.learning import clears_bar, mean_score, train_on_defaults

UPDATES = 1_500
SAMPLES_PER_INSERT = 0.5  # held (exact ratio): about 192K transitions whatever else the machine runs
EPISODES = 100
HELD_OUT_SEED = 777
BAR = (20.0, 2.25)  # greedy mean cells saved must beat random by at least 20 cells and by 2.25x


@pytest.mark.extended  # a learning check beyond the pipeline's own (Catch's and Snake's): make test-all runs it
@pytest.mark.slow  # minutes: scheduled first (tests/conftest.py)
@pytest.mark.timeout(1500)  # a hang guard: the run ends on its update budget
def test_fuel_breaks_are_learned_end_to_end_on_defaults(tmp_path, record_property):
    out, run = train_on_defaults(
        tmp_path,
        "fuelbreak",
        "--learner.steps",
        str(UPDATES),
        "--learner.exact-ratio",
        "--learner.samples-per-insert",
        str(SAMPLES_PER_INSERT),
        timeout=1400,
    )
    assert "4 actors x 32 env(s) on fuelbreak (obs uint8 8x32x32, stack 1, 1024 actions, masked, cell net)" in out, out[:2000]
    state = load_checkpoint(run)
    cfg = read_config(state["config"])
    assert (options(cfg.env, "fuelbreak", FuelbreakOptions).size, options(cfg.env, "fuelbreak", FuelbreakOptions).budget) == (
        32,
        16,
    )
    assert state["counters"]["updates"] == UPDATES
    net = build_network(cfg.env, state["learner"]["online"])
    greedy, random = (
        mean_score(n, cfg.env, policy, EPISODES, HELD_OUT_SEED) for n, policy in ((net, "greedy"), (None, "random"))
    )
    torch.manual_seed(cfg.learner.seed)  # the learner's initial network (learner/trainer.py seeds it so)
    untrained = mean_score(build_network(cfg.env), cfg.env, "greedy", EPISODES, HELD_OUT_SEED)
    figures = (
        f"Fuel breaks 32x32, budget 16, after {state['counters']['updates']} updates, "
        f"{state['counters']['inserted']:,} transitions: greedy saves {greedy:.1f} cells per episode, "
        f"random valid placements {random:.1f}, the untrained network {untrained:.1f}"
    )
    record_property("figures", figures)  # printed at the end of every run (tests/conftest.py)
    assert not clears_bar(untrained, random, BAR), f"the bar does not tell learning: untrained {untrained:.1f}"
    assert clears_bar(greedy, random, BAR), f"greedy {greedy:.1f} vs random {random:.1f}\n{out[-3000:]}"
