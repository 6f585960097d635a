"""The collector (actors/collector.py): what it puts into a batch besides the env's own steps."""

import numpy as np
import pytest

from shared.resolution import resolve_run


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_collector_acts_on_a_folded_copy_of_the_weights_it_last_loaded(precision):
    """actor.precision: the collector's Q comes from acting_copy(the loaded weights) in that precision, is float32, and
    is the loaded network's Q (fp32: to rounding; bf16: within bf16's precision); at epsilon 0 the first tick's actions
    are its argmax."""
    import torch

    from actors.collector import Collector
    from shared.config import RunConfig
    from shared.network import build_q_network
    from shared.resolution import resolve_config
    from tests.support.networks import randomise_batchnorm

    cfg = RunConfig(actors=1)
    cfg.env.name, cfg.env.frame_size = "catch", 36
    cfg.actor.envs_per_actor, cfg.actor.epsilon, cfg.actor.seed, cfg.actor.precision = 8, 0.0, 5, precision
    cfg = resolve_config(cfg)
    collector = Collector(resolve_run(cfg, device="cpu"), 0, 1, 0)
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


def test_an_exploring_env_draws_a_fresh_uniform_action_every_step():
    """Epsilon 1: no forward pass, every action random, each step drawn anew (no action is held over steps)."""
    from actors.collector import Collector
    from shared.config import RunConfig
    from shared.resolution import resolve_config

    cfg = RunConfig(actors=1)
    cfg.env.name, cfg.env.frame_size = "catch", 36
    cfg.actor.envs_per_actor, cfg.actor.epsilon, cfg.actor.seed = 8, 1.0, 5
    cfg = resolve_config(cfg)
    collector = Collector(resolve_run(cfg, device="cpu"), 0, 1, 0)
    steps = [collector.act() for _ in range(200)]
    collector.close()
    assert all(q is None for _, q in steps)
    actions = np.stack([a for a, _ in steps])
    assert set(np.unique(actions)) == set(range(collector.num_actions))
    assert (actions[1:] != actions[:-1]).mean() > 0.5  # 3 actions: a repeat 1/3 of the time, not held


def test_exploration_anneals_on_the_runs_env_steps_sent_with_the_weights():
    """A collector started into a run that is far along (a resumed run's new actors, a restarted actor) plays at its
    floor once the weights say how far the run is, instead of annealing from 1.0 again; each env counts as its share
    of the run's env steps."""
    from actors.collector import Collector
    from shared.config import RunConfig
    from shared.exploration import epsilon_floors

    cfg = RunConfig(actors=2)
    cfg.env.name, cfg.env.frame_size = "fake", 36
    cfg.actor.envs_per_actor, cfg.actor.eps_anneal_env_steps = 2, 4_000  # 1,000 steps of each of the run's 4 envs
    run = resolve_run(cfg, device="cpu")
    young, old = Collector(run, 0, 1, 0), Collector(run, 0, 2, 0)
    arrays = {name: t.numpy() for name, t in young.net.state_dict().items()}
    young.load_weights(1, arrays, run=9, env_steps=400)  # 100 steps per env: a tenth of the anneal
    old.load_weights(1, arrays, run=9, env_steps=40_000)  # 10,000 per env: long past it
    young.collect(2, 0), old.collect(2, 0)
    floors = epsilon_floors(run.cfg.actor, 2, 0)
    np.testing.assert_allclose(old.epsilon, floors)
    np.testing.assert_allclose(young.epsilon, floors + (1 - floors) * (1 - 100 / 1_000))  # the run is 100 steps per env
    young.close(), old.close()
