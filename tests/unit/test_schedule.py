"""Periods in env steps: target sync, broadcast and resets fall at the same env steps whatever the replay ratio or
batch; a reset never falls within one period of the budget; the n-step schedule restarts at each reset."""

import numpy as np
import pytest
import torch

from learner.loop import Learner
from learner.schedule import EnvStepPeriod, NStepSchedule
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
    learner = Learner(cfg.validate(), str(run_dir), torch.device("cpu"))
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


def test_n_step_schedule_falls_exponentially_from_start_to_end_and_restarts():
    n = NStepSchedule(10, 3, 5_000)
    assert n.at(0) == 10  # before the first restart: the start
    n.restart(1_000)
    # round(10 * 0.3 ** (t / 5000)): 10, 8.6, 5.48, 3.0, then 3
    assert [n.at(s) for s in (500, 1_000, 1_500, 3_500, 6_000, 50_000)] == [10, 10, 9, 5, 3, 3]
    seq = [n.at(s) for s in range(1_000, 7_000, 50)]
    assert seq == sorted(seq, reverse=True) and set(seq) == set(range(3, 11))  # every n on the way, never back up
    n.restart(20_000)
    assert n.at(20_000) == 10
    assert NStepSchedule(0, 3, 5_000).at(0) == 3  # off
    for bad in ((2, 3, 100), (10, 0, 100), (10, 3, 0)):
        with pytest.raises(ValueError, match=f"start {bad[0]} >= end {bad[1]} >= 1 and env_steps {bad[2]}"):
            NStepSchedule(*bad)


def test_the_learner_draws_at_the_schedules_n_and_a_reset_restarts_it(tmp_path):
    """A real Learner on a filled replay: n falls 8 -> 2 over 400 env steps from the first update, each reset (every
    1,000) brings it back to 8, and the trainer asks the replay for that n (one past what replay holds is refused)."""
    cfg = small_config(actors=1, envs=1, frame_size=42)
    cfg.collect_only, cfg.replay.prioritized, cfg.replay.n_step = False, False, 2
    cfg.learner.n_step_start, cfg.learner.n_step_anneal_env_steps = 8, 400
    cfg.learner.min_replay, cfg.learner.reset_env_steps, cfg.total_env_steps = 100, 1_000, 5_000
    cfg.learner.micro_batch, cfg.learner.compile, cfg.learner.amp = 16, False, "off"
    learner = Learner(cfg.validate(), str(tmp_path), torch.device("cpu"))
    try:
        replay, T = learner.plane.replay, 600
        assert replay.n_step == 8  # windows for the longest n the schedule draws
        frames = np.random.default_rng(0).integers(0, 256, (1, T, 42, 42), dtype=np.uint8)
        first = np.zeros((1, T), bool)
        first[0, 0] = True
        replay.add(0, frames, np.zeros((1, T), np.uint8), np.ones((1, T), np.float32), np.zeros((1, T), bool), first)
        drawn = {}
        for steps in range(200, 4_001, 100):
            learner._schedule(steps)
            drawn[steps] = learner.dqn.n_step
            learner.dqn.update(replay)
            learner._periodic(steps)
        assert learner.resets == 4  # at 1,000, 2,000, 3,000 and 4,000 (4,000 + 1,000 is within the budget)
        # from 200: round(8 * 0.25 ** (t / 400)); after the reset at 1,000 (t counted from 1,000)
        assert [drawn[s] for s in (200, 300, 400, 500, 600, 1_000)] == [8, 6, 4, 3, 2, 2]
        assert [drawn[s] for s in (1_100, 1_200, 1_400, 2_000, 2_100)] == [6, 4, 2, 2, 6]
        learner.dqn.n_step = 9
        with pytest.raises(ValueError, match=r"n_step=9 must be an int in \[1, 8\]"):
            learner.dqn.update(replay)
    finally:
        learner.server.stop()
        learner.plane.close()
