"""The probe set (shared/probe_set.py) and the figures measured on it (learner/probe_figures.py)."""

import os

import numpy as np
import pytest
import torch

from learner.probe_figures import FIGURES, ProbeMonitor, probe_figures
from shared.config import EnvConfig
from shared.envs import action_names, env_spec
from shared.envs.frames import FrameStacker
from shared.probe_set import (
    PROBE_NAME,
    probe_set,
    probe_set_cached,
    scripted_play,
    stack_frames,
)

# --------------------------------------------------------------------------- the probe set


def test_mario_probe_states_are_the_same_for_the_same_arguments():
    """The emulator is deterministic given the actions, and the actions come from the seed."""
    cfg = EnvConfig()
    a, b = probe_set(cfg, n=24, seed=3).states, probe_set(cfg, n=24, seed=3).states
    assert a.shape == (24, 4, 84, 84) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, probe_set(cfg, n=24, seed=4).states)  # another seed, other random actions


def test_mario_scripted_policy_holds_right_a_and_explores_on_a_share_of_steps():
    cfg = EnvConfig()
    play = scripted_play(cfg, 200, seed=0, explore=0.05)
    right_a = action_names(cfg).index("right+A")
    share = (play.actions != right_a).mean()
    assert 0 < share < 0.1  # a random action on 5% of steps (itself right+A one time in 7)
    assert play.scores.max() > 300  # right+A moves on


@pytest.mark.parametrize("name", ["catch", "fake", "snake", "fuelbreak"])
def test_other_envs_get_a_seeded_random_policy(name):
    cfg = EnvConfig(name=name)
    spec = env_spec(cfg)
    a, b = probe_set(cfg, n=16, seed=1), probe_set(cfg, n=16, seed=1)
    assert a.states.shape == (16, *spec.input_shape) and a.states.dtype == np.dtype(spec.obs_dtype)
    np.testing.assert_array_equal(a.states, b.states)
    assert (a.masks is None) == (not spec.masked)
    if spec.masked:
        np.testing.assert_array_equal(a.masks, b.masks)
        play = scripted_play(cfg, 40, seed=1)
        assert play.masks is not None and play.masks[np.arange(40), play.actions].all()  # only valid actions played
    else:
        assert len(set(scripted_play(cfg, 60, seed=1).actions.tolist())) == spec.num_actions  # not one held action


def test_stacks_are_what_the_actors_stack():
    """Catch's short episodes: stacks across resets are FrameStacker's (a reset fills every slot)."""
    cfg = EnvConfig(name="catch")
    play = scripted_play(cfg, 60, seed=2)
    assert play.first.sum() > 3  # several episodes
    stacker = FrameStacker(4, play.frames.shape[1:])
    want = []
    for frame, first in zip(play.frames, play.first):
        want.append((stacker.reset if first else stacker.push)(frame).copy())
    np.testing.assert_array_equal(play.stacks(4), np.stack(want))
    index = np.array([0, 7, 59])
    np.testing.assert_array_equal(stack_frames(play.frames, play.first, 4, index), np.stack(want)[index])
    np.testing.assert_array_equal(stack_frames(play.frames, play.first, 1, index), play.frames[index])


def test_the_run_folder_keeps_its_probe_set(tmp_path, monkeypatch):
    cfg = EnvConfig(name="fuelbreak")
    made = probe_set_cached(str(tmp_path), cfg, n=8, seed=5)
    assert os.listdir(tmp_path) == [PROBE_NAME]

    def no_play(*args, **kwargs):
        raise AssertionError("played again: the file was not read")

    monkeypatch.setattr("shared.probe_set.scripted_play", no_play)
    read = probe_set_cached(str(tmp_path), cfg, n=8, seed=5)
    np.testing.assert_array_equal(read.states, made.states)
    np.testing.assert_array_equal(read.masks, made.masks)
    np.testing.assert_array_equal(read.scores, made.scores)
    with pytest.raises(ValueError, match="probe set is fixed"):
        probe_set_cached(str(tmp_path), cfg, n=9)


# --------------------------------------------------------------------------- the figures


class TableNet(torch.nn.Module):
    """Q-values set by hand: state i (its one feature holds i) has Q ``table[i]``; a BatchNorm that records the mode
    of each forward."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table, dtype=torch.float32))
        self.norm = torch.nn.BatchNorm1d(1)
        self.modes: list[bool] = []

    def forward(self, obs):
        self.modes.append(self.norm.training)
        return self.table[obs[:, 0].long()] * 1.0


STATES = np.arange(4, dtype=np.float32)[:, None]
Q = [[1.0, 3.0, 2.0], [5.0, 4.0, 0.0], [-2.0, -1.0, -4.0], [0.0, 0.5, 10.0]]
# best 3, 5, -1, 10; second 2, 4, -2, 0.5; gaps 1, 1, 1, 9.5; relative 1/3, 1/5, 1, 0.95


def test_figures_by_hand():
    net = TableNet(Q).train()
    monitor = ProbeMonitor(STATES, "cpu")
    first = monitor.observe(net)
    assert list(first) == list(FIGURES)
    assert first["probe/churn"] == 0.0
    assert first["probe/gap"] == pytest.approx(1.0)
    assert first["probe/gap_relative"] == pytest.approx((1 / 3 + 0.95) / 2)  # median of 0.2, 1/3, 0.95, 1
    assert first["probe/q_mean"] == pytest.approx((3 + 5 - 1 + 10) / 4)
    assert net.training and net.modes == [False]  # eval mode for the forward, train mode restored
    with torch.no_grad():
        net.table[0] = torch.tensor([3.0, 1.0, 2.0])  # state 0's greedy action 1 -> 0, its gap still 1
        net.table[3] = torch.tensor([0.0, 0.5, 10.5])  # state 3's Q moves, its greedy action does not
    second = monitor.observe(net.eval())
    assert second["probe/churn"] == pytest.approx(0.25)
    assert not net.training
    assert monitor.observe(net)["probe/churn"] == 0.0  # against the call before


def test_figures_over_valid_actions_only():
    masks = np.array([[True, False, True], [True, True, True], [False, True, False], [True, True, True]])
    figures, greedy = probe_figures(torch.tensor(Q), torch.from_numpy(masks))
    assert greedy.tolist() == [2, 0, 1, 2]
    # gaps: 2 - 1 = 1, 1, none (one valid action), 9.5; best: 2, 5, -1, 10
    assert figures["probe/gap"] == pytest.approx(1.0)
    assert figures["probe/gap_relative"] == pytest.approx(0.5)  # median of 1/2, 1/5, 0.95
    assert figures["probe/q_mean"] == pytest.approx((2 + 5 - 1 + 10) / 4)
    monitor = ProbeMonitor(STATES, "cpu", masks=masks)
    assert monitor.observe(TableNet(Q)) == pytest.approx(figures, nan_ok=True)
    churned, _ = probe_figures(torch.tensor(Q), None, previous=greedy)
    assert churned["probe/churn"] == pytest.approx(0.25)  # unmasked greedy 1, 0, 1, 2: state 0 differs


def test_chunks_give_the_same_figures():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(10, 5)).tolist()
    states = np.arange(10, dtype=np.float32)[:, None]
    whole = ProbeMonitor(states, "cpu").observe(TableNet(table))
    chunked = ProbeMonitor(states, "cpu", chunk=3)
    assert chunked.observe(TableNet(table)) == pytest.approx(whole)
    q = torch.tensor(table)
    gaps = (q.topk(2).values[:, 0] - q.topk(2).values[:, 1]).numpy()
    assert whole["probe/gap"] == pytest.approx(float(np.median(gaps)))


def test_a_real_network_in_eval_mode():
    """Mario's network on random stacks: one forward, the Q of eval mode."""
    from shared.network import build_q_network

    torch.manual_seed(0)
    net = build_q_network(env_spec(EnvConfig(name="fake"))).train()
    states = np.random.default_rng(0).integers(0, 256, (6, 4, 84, 84), dtype=np.uint8)
    monitor = ProbeMonitor(states, "cpu")
    q = monitor.q_values(net)
    assert net.training and q.dtype == torch.float32 and q.shape == (6, 7)
    with torch.no_grad():
        want = net.eval()(torch.from_numpy(states))
    torch.testing.assert_close(q, want)
