"""Snake learns through the whole distributed pipeline on the shipped defaults: launch.local with its 4 actor
processes, real sockets, weight broadcast, prioritized replay with actor priorities, the MLP on flood-fill
features, the learner. Only the duration is set (and the run folder and ports); the grid is the default 10x10.

The final checkpoint's greedy policy (epsilon 0) then plays 100 episodes, one per env of one vector env, and a
uniformly random policy 100 more on the same seeds: food eaten per episode. Measured here (2 cores shared with
another session's test suite, load about 5): after 30 s, 619 updates and 34,368 transitions, greedy 5.96 food per
episode against random 0.11; after 45 s (1,024 updates), 8.70 against 0.11. The bar: greedy at least 2 food above
random and at least 4x random, which a pipeline that does not learn (random: about 0.1) cannot reach.
"""


import pytest

from actors.evaluator import build_network, play_episodes
from learner.checkpoint import load_checkpoint
from shared.config import RunConfig
from tests.conftest import train_on_defaults

DURATION = 30  # seconds of training after the learner's compile warm-up
EPISODES = 100
SNAKE_BAR = (2.0, 4.0)  # greedy mean food must beat random by at least 2 food and by 4x


def mean_food(net, env_cfg, policy: str) -> float:
    episodes = play_episodes(net, env_cfg, EPISODES, 0.0, seed=777, policy=policy)
    return sum(e.x_pos for e in episodes) / len(episodes)


@pytest.mark.xdist_group("learning")  # one worker runs the learning tests one after the other
@pytest.mark.timeout(300)
def test_snake_learns_end_to_end_on_defaults(tmp_path):
    out, run = train_on_defaults(tmp_path, "snake", DURATION, timeout=240)
    assert "on snake (obs float32 14, stack 1, 3 actions, mlp net)" in out, out[:2000]
    state = load_checkpoint(run)
    cfg = RunConfig.from_json(state["config"])
    assert cfg.env.snake_size == 10 and state["counters"]["updates"] > 0
    net = build_network(cfg.env, state["learner"]["online"])
    greedy, random = mean_food(net, cfg.env, "greedy"), mean_food(None, cfg.env, "random")
    print(f"Snake 10x10 after {state['counters']['updates']} updates, {state['counters']['inserted']:,} transitions: "
          f"greedy {greedy:.2f} food per episode, random {random:.2f}")
    low, ratio = SNAKE_BAR
    assert greedy >= random + low and greedy >= ratio * random, \
        f"greedy {greedy:.2f} vs random {random:.2f}\n{out[-3000:]}"
