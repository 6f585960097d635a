"""Periods in env steps: target sync, broadcast and resets fall at the same env steps whatever the replay ratio or
batch; a reset never falls within one period of the budget."""

import pytest
import torch

from learner.loop import Learner
from learner.schedule import EnvStepPeriod
from shared.resolution import resolve_run
from tests.support.batches import synthetic_batch
from tests.support.runs import small_config


def test_a_period_fires_once_per_multiple_crossed_and_not_for_those_passed_before_a_resume():
    period = EnvStepPeriod(1000)
    fired = [s for s in (0, 400, 999, 1000, 1001, 2500, 2600, 3000) if period.due(s)]
    assert fired == [1000, 2500, 3000]  # 2500 crosses 2000 (once, though late); 3000 crosses 3000
    assert [s for s in (2100, 3200, 4000) if EnvStepPeriod(1000, env_steps=2100).due(s)] == [3200, 4000]
    assert not any(EnvStepPeriod(0).due(s) for s in range(0, 10_000, 100))
    with pytest.raises(ValueError, match="period -5"):
        EnvStepPeriod(-5)


def test_no_reset_within_one_period_of_the_budget():
    resets = EnvStepPeriod(20_000, budget=100_000, last_part=20_000)
    assert resets.multiples(100_000) == [20_000, 40_000, 60_000, 80_000]  # BBF: the last 20% free of resets
    assert [s for s in range(0, 100_001, 500) if resets.due(s)] == [20_000, 40_000, 60_000, 80_000]
    assert EnvStepPeriod(30_000, budget=100_000, last_part=30_000).multiples(100_000) == [30_000, 60_000]


def _syncs_and_broadcasts(run_dir, samples_per_insert: float, batch: int, env_steps: int = 2_400):
    """Drive a real Learner's periods through a run held at ``samples_per_insert``: one update per batch /
    samples_per_insert env steps; returns the env steps after which the target net equalled the online net right
    after an update (a sync) and those at which a new weights_version was published."""
    cfg = small_config(actors=1, envs=1, frame_size=42)  # the synthetic batches' frames
    cfg.collect_only = False
    cfg.learner.samples_per_insert = samples_per_insert
    cfg.learner.micro_batch, cfg.learner.compile, cfg.learner.amp = batch, False, "off"
    cfg.learner.target_sync_env_steps, cfg.learner.broadcast_env_steps = 800, 320
    run_dir.mkdir()
    learner = Learner(resolve_run(cfg.validate(), device="cpu"), str(run_dir))
    try:
        synced, published = [], []
        per_update = batch / samples_per_insert
        for k in range(1, int(env_steps / per_update) + 1):
            learner.dqn.update(None, [synthetic_batch(batch, seed=k)])
            version = learner.counters.weights_version
            steps = int(k * per_update)
            learner._periodic(steps)
            online, target = learner.dqn.online.state_dict(), learner.dqn.target.state_dict()
            if all(torch.equal(online[n], target[n]) for n in online):
                synced.append(steps)
            if learner.counters.weights_version != version:
                published.append(steps)
        return synced, published
    finally:
        learner.server.stop()
        learner.plane.close()


def test_target_sync_and_broadcast_stay_put_in_env_steps_when_the_ratio_or_batch_changes(tmp_path):
    at_1 = _syncs_and_broadcasts(tmp_path / "r1", 1, 16)  # an update every 16 env steps
    at_4 = _syncs_and_broadcasts(tmp_path / "r4", 4, 32)  # every 8
    assert at_1[0] == at_4[0] == [800, 1_600, 2_400]
    assert at_1[1] == at_4[1] == [320 * i for i in range(1, 8)]
