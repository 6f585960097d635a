"""shared/evaluation/drills.py: the Wilson interval, Mario 1-1's reference episode and its drill points, and trials that
add up and repeat on their seed (the fake env for the whole row, Mario 1-1 for one point)."""

import math

import numpy as np
import pytest

from shared.config import EnvConfig
from shared.envs import action_names, make_env
from shared.envs.frames import FrameStacker
from shared.envs.mario import HAZARDS
from shared.errors import ConfigError
from shared.evaluation import drills
from shared.evaluation.drills import LEAD, drill_points, play_drills, reference, wilson_interval
from shared.evaluation.episodes import play_episodes

MARIO = EnvConfig(name="mario")
FAKE = EnvConfig(name="fake", frame_size=36)


def test_the_wilson_interval_is_the_hand_computed_one():
    # 15 of 20, z = 1.96: p = 0.75, z^2/n = 0.192073, centre 0.75 + 3.841459/40 = 0.846036,
    # half 1.959964 * sqrt(0.1875/20 + 3.841459/1600) = 0.212689; (0.846036 -+ 0.212689) / 1.192073
    low, high = wilson_interval(15, 20)
    assert low == pytest.approx(0.531299, abs=1e-5) and high == pytest.approx(0.888138, abs=1e-5)
    assert wilson_interval(0, 20) == (0.0, pytest.approx(3.841459 / 20 / (1 + 3.841459 / 20), abs=1e-6))
    assert wilson_interval(0, 0) == (0.0, 1.0) and wilson_interval(50, 50)[1] == 1.0
    with pytest.raises(ConfigError, match="successes=21"):
        wilson_interval(21, 20)


def _scores_and_stacks(cfg, ref):
    """The reference replayed on a fresh env: each step's score (index t: after t steps) and each stacked observation."""
    env = make_env(cfg, ref.seed)
    stacker = FrameStacker(cfg.stack, env.frame_shape)
    scores, stacks = [0.0], [stacker.reset(env.reset()).copy()]
    try:
        for a in ref.episode.actions.tolist():
            frame, _, terminated, truncated, info = env.step(a)
            scores.append(info["score"])
            stacks.append(stacker.push(frame).copy())
            if terminated or truncated:
                break
    finally:
        env.close()
    return np.array(scores), stacks


def test_mario_1_1s_reference_reaches_the_flag_the_same_way_twice_and_its_points_lie_lead_steps_before_each_hazard():
    ref = reference(MARIO)
    assert ref.episode.success and ref.episode.score >= 3100  # right+A with 5% random presses: the flag
    hold = action_names(MARIO).index("right+A")
    (again,) = play_episodes(None, MARIO, 1, drills.REFERENCE_EPSILON, ref.seed, policy="constant", action=hold)
    assert np.array_equal(again.actions, ref.episode.actions)  # its try played afresh: the same episode
    assert np.mean(ref.episode.actions == hold) > 0.9
    points = drill_points(MARIO)
    assert [p.name for p in points] == [name for name, _, _ in HAZARDS["1-1"]]  # each hazard, in order
    scores, stacks = _scores_and_stacks(MARIO, ref)
    for p, (_, lo, hi) in zip(points, HAZARDS["1-1"]):
        first = int(np.argmax(scores >= lo))  # the step count at which the reference first reaches lo
        assert (p.lo, p.hi) == (lo, hi) and p.lead == LEAD and p.t == first - LEAD, p
        assert p.x == scores[p.t] < lo <= scores[p.t + p.lead]
        assert np.array_equal(p.stack, stacks[p.t])  # the agent's observation there, its frame history included
    assert drill_points(MARIO) is not points and drill_points(MARIO)[0] is points[0]  # cached


def test_drills_on_the_fake_env_add_up_and_repeat_on_their_seed():
    points = drill_points(FAKE, lead=5, spacing=64)
    assert [p.name for p in points] == [f"x{lo}" for lo in range(64, int(reference(FAKE).episode.score) + 1, 64)]
    assert all(p.x < p.lo and 1 <= p.lead <= 5 for p in points)
    one = play_drills(FAKE, 7, 0.05, 11, 5, spacing=64, policy="random")
    pooled = play_drills(FAKE, 7, 0.05, 11, 5, spacing=64, policy="random", processes=2)  # one job per point and variant
    assert pooled.points == one.points and pooled.predicted_success_rate == one.predicted_success_rate
    assert one.epsilon == 1.0 and one.trials == 7 and one.lead == 5 and one.seed == 11 and one.reference["success"]
    for d in one.points:
        assert 0 <= d.passes <= d.trials == 7 and 0 <= d.forced_passes <= 7 and d.steps >= 2 * 7
        assert d.pass_rate == d.passes / 7 and d.pass_rate_ci == list(wilson_interval(d.passes, 7))
    assert one.predicted_success_rate == pytest.approx(math.prod(d.pass_rate for d in one.points))
    with pytest.raises(ConfigError, match="trials=0"):
        play_drills(FAKE, 0, 0.05, 11, policy="random")
    with pytest.raises(ConfigError, match="catch"):
        drill_points(EnvConfig(name="catch"))


def test_a_constant_right_a_drill_repeats_on_its_seed_and_differs_on_another():
    pipes = drill_points(MARIO)[1]
    hold = action_names(MARIO).index("right+A")
    env = make_env(MARIO, 0)
    try:
        job = dict(policy="constant", action=hold, epsilon=0.05, index=1, trials=3)
        runs = [drills._trials(env, None, pipes, dict(job, seed=seed, forced=True), 7) for seed in (3, 3, 4)]
    finally:
        env.close()
    assert runs[0] == runs[1]  # (passes, steps): the same trials
    assert all(0 <= passes <= 3 and steps >= 3 for passes, steps in runs)
    assert runs[0][1] != runs[2][1]  # another seed presses elsewhere: the steps differ
