"""The collector (actors/collector.py): what it puts into a batch besides the env's own steps."""

import numpy as np
import pytest


def test_episode_end_shaping_changes_the_trained_rewards_only_at_terminations_and_not_the_logged_returns():
    """actor.death_penalty and actor.success_bonus on Catch (every episode terminates: +1 caught, the success; -1
    missed): two collectors with the same seeds and random actions play the same steps; the shaped one's rewards
    differ exactly at terminations (a miss -2 more, a catch +3 more), its episode returns (game units) do not, and
    its initial priorities are computed from the shaped rewards."""
    from actors.collector import Collector
    from shared.config import RunConfig

    def collect(penalty: float, bonus: float):
        cfg = RunConfig(actors=1)
        cfg.env.name, cfg.env.frame_size = "catch", 36
        cfg.actor.envs_per_actor, cfg.actor.epsilon, cfg.actor.seed = 2, 1.0, 5
        cfg.actor.death_penalty, cfg.actor.success_bonus = penalty, bonus
        cfg.replay.prioritized = True
        cfg.validate()
        collector = Collector(cfg, 0, 1, 0)
        batch = collector.collect(40, 0)
        collector.close()
        return batch

    plain, shaped = collect(0.0, 0.0), collect(2.0, 3.0)
    frames, actions, rewards, terminated, _ = plain.arrays
    assert np.array_equal(shaped.arrays[0], frames) and np.array_equal(shaped.arrays[1], actions)
    caught, missed = (terminated == 1) & (rewards > 0), (terminated == 1) & (rewards < 0)
    assert caught.sum() >= 1 and missed.sum() >= 1  # 40 steps of 2 envs: 8 episodes, both kinds
    want = rewards + np.where(caught, 3.0, 0.0) + np.where(missed, -2.0, 0.0)
    np.testing.assert_array_equal(shaped.arrays[2], want.astype(np.float32))
    np.testing.assert_array_equal(shaped.episodes, plain.episodes)  # return, score, success in game units
    assert set(np.unique(shaped.episodes[:, 0])) <= {-1.0, 1.0}
    assert not np.allclose(shaped.priorities, plain.priorities)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_collector_acts_on_a_folded_copy_of_the_weights_it_last_loaded(precision):
    """actor.precision: the collector's Q comes from acting_copy(the loaded weights) in that precision, is float32, and
    is the loaded network's Q (fp32: to rounding; bf16: within bf16's precision); at epsilon 0 the first tick's actions
    are its argmax."""
    import torch

    from actors.collector import Collector
    from shared.config import RunConfig
    from shared.network import build_q_network
    from tests.unit.test_network import randomise_batchnorm

    cfg = RunConfig(actors=1)
    cfg.env.name, cfg.env.frame_size = "catch", 36
    cfg.actor.envs_per_actor, cfg.actor.epsilon, cfg.actor.seed, cfg.actor.precision = 8, 0.0, 5, precision
    cfg.validate()
    collector = Collector(cfg, 0, 1, 0)
    torch.manual_seed(1)
    source = build_q_network(collector.spec)
    randomise_batchnorm(source, seed=3)
    source.eval()
    collector.load_weights(3, {name: t.numpy() for name, t in source.state_dict().items()})
    assert collector.weights_version == 3
    assert collector.acting_net.compute_dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    with torch.inference_mode():
        want = source(torch.from_numpy(collector.stacks)).numpy()
    got = collector.q_values()
    assert got.shape == (8, collector.num_actions) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-4 if precision == "fp32" else 0.1, rtol=1e-4 if precision == "fp32" else 0.05)
    batch = collector.collect(4, 0)
    collector.close()
    if precision == "fp32":
        np.testing.assert_array_equal(batch.arrays[1][:, 0], want.argmax(1))
    assert batch.arrays[1].shape == (8, 4)
