"""The learning tests' runs: training on the shipped defaults, then scoring the greedy net against a bar."""

import glob
import os
import subprocess
import sys

from tests.support.paths import ROOT
from tests.support.runs import free_base_port


def mean_score(net, env_cfg, policy: str, episodes: int, seed: int) -> float:
    """Mean score (Snake's food, fuel breaks' cells saved) of ``episodes`` episodes at epsilon 0."""
    from shared.evaluation.episodes import play_episodes

    played = play_episodes(net, env_cfg, episodes, 0.0, seed=seed, policy=policy)
    return sum(e.score for e in played) / len(played)


def clears_bar(greedy: float, random: float, bar: tuple[float, float]) -> bool:
    """``greedy`` beats ``random`` by at least ``bar[0]`` and by at least ``bar[1]`` times."""
    margin, ratio = bar
    return greedy >= random + margin and greedy >= ratio * random


def train_on_defaults(tmp_path, env_name: str, *budget: str, timeout: float) -> tuple[str, str]:
    """``python -m launch.local --env.name ENV BUDGET...`` on the shipped defaults (only the budget, e.g.
    ``--learner.steps N``, the run folder, ports and log interval set, ``--seed 0``: the seed the measured
    figures in docs/lab/testing-log.md used, and no end-of-run evaluation: the tests play their own); asserts exit 0 and
    returns (console output, run folder). ``timeout`` only guards against a hang."""
    base = free_base_port(6) + 2
    cmd = [
        sys.executable,
        "-m",
        "launch.local",
        "--env.name",
        env_name,
        "--seed",
        "0",
        "--eval.final-episodes",
        "0",
        *budget,
        "--log-every",
        "10",
        "--transport.base-port",
        str(base),
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out, glob.glob(os.path.join(str(tmp_path), "*"))[0]
