"""The collector (actors/collector.py): what it puts into a batch besides the env's own steps."""

import numpy as np


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
