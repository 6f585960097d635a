"""The whole distributed path learns on the shipped defaults: Catch, 2 actor processes, real sockets, weight
broadcast, replay, learner. Only sizes (frame size 42, replay capacity, min_replay) and duration are set here.

A random policy scores about -0.6 on Catch (20% of balls caught). The test asks the trained network, played greedily
in-process from the final checkpoint, for a mean return of at least 0.0 over 200 episodes: half of the balls caught,
2.5x random. On the defaults (n-step 3, batch 64, target sync every 250 updates) Catch is slow to learn: its only
reward comes at the 9th step, so the return reaches the first step through several target syncs. Measured here:
-0.20 and -0.34 after 4,000 updates, 0.31 after 10,000 (the greedy return moves in steps of about 0.4, the 5 ball
columns), so the test runs 10,000 updates and the bar sits at 0.0, far above a random or broken pipeline's -0.6.
"""

import glob
import os
import subprocess
import sys

import pytest
import torch

from learner.checkpoint import load_checkpoint
from shared.catch import CatchEnv
from shared.env import FrameStacker
from shared.network import QNetwork
from tests.conftest import free_base_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = 42


def greedy_return(state: dict, episodes: int) -> float:
    net = QNetwork(4, 3, SIZE)
    net.load_state_dict(state)
    net.eval()
    env, stacker, total = CatchEnv(SIZE, seed=12345), FrameStacker(4, (SIZE, SIZE)), 0.0
    with torch.inference_mode():
        for _ in range(episodes):
            stacker.reset(env.reset())
            done = False
            while not done:
                action = int(net(torch.from_numpy(stacker.array[None])).argmax())
                frame, reward, done, _, _ = env.step(action)
                stacker.push(frame)
                total += reward
    return total / episodes


def run_catch(tmp_path, steps: int, *extra: str) -> tuple[str, dict]:
    """launch.local on Catch with the shipped defaults; only sizes and duration are set here."""
    base = free_base_port(4) + 2
    cmd = [sys.executable, "-m", "launch.local", "--actors", "2", "--env.name", "catch", "--env.frame-size", str(SIZE),
           "--replay.capacity", "20000", "--learner.min-replay", "1000",
           "--learner.steps", str(steps), "--duration", "840", "--log-every", "10",
           "--transport.base-port", str(base), "--run-dir", str(tmp_path), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out, load_checkpoint(glob.glob(os.path.join(str(tmp_path), "*"))[0])


@pytest.mark.timeout(960)
def test_dqn_learns_catch_end_to_end_on_defaults(tmp_path):
    steps = 10_000
    out, state = run_catch(tmp_path, steps)
    assert f"[MAIN] Epoch {steps // 20} - Loss:" in out, out
    assert state["counters"]["updates"] == steps
    assert state["counters"]["weights_version"] == steps // 20 // 5  # broadcast every 5 epochs of 20 updates
    score = greedy_return(state["learner"]["online"], episodes=200)
    print(f"Catch greedy return after {state['counters']['updates']} updates: {score:.2f}")
    assert score >= 0.0, f"greedy return {score:.2f} (random is about -0.6)\n{out[-3000:]}"
