"""Shared test helpers: free loopback ports, small run configurations, training on the shipped defaults; and the
machine in pytest's header (CPU model, cores, native bf16), so a CI log tells which machine kind it ran on."""

import glob
import os
import random
import socket
import subprocess
import sys

import pytest

from shared.config import RunConfig


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (minutes: the learning runs, the benchmark) go first: with ``make test``'s one test at a
    time per worker (``--maxschedchunk 1``) the two workers then start on the long ones and even out on the short."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: collection order otherwise


def pytest_terminal_summary(terminalreporter) -> None:
    """The learning tests' figures (``record_property("figures", ...)``), passed or not, at the end of every run."""
    figures = [value for reports in terminalreporter.stats.values() for report in reports
               if getattr(report, "when", "") == "call"
               for name, value in getattr(report, "user_properties", ()) if name == "figures"]
    if figures:
        terminalreporter.write_sep("-", "learning figures")
        for line in figures:
            terminalreporter.write_line(line)


def pytest_report_header(config) -> list[str]:
    from launch.machine import describe_machine, machine_line

    return [f"machine: {machine_line(describe_machine())}"]


def free_base_port(count: int) -> int:
    """A base port such that base..base+count-1 are all free on 127.0.0.1 right now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range found")


def small_config(actors=2, envs=2, steps=16, env="fake", capacity=8192, **env_overrides) -> RunConfig:
    cfg = RunConfig(actors=actors, collect_only=True)
    cfg.env.name = env
    for key, value in env_overrides.items():
        setattr(cfg.env, key, value)
    cfg.actor.envs_per_actor = envs
    cfg.actor.batch_steps = steps
    cfg.replay.capacity = capacity
    cfg.actor.weights_timeout = 0.0  # data-plane tests run no weight server
    cfg.actor.nice = 0  # exact-count plumbing tests: actors flush on close at full priority (the default is 10)
    cfg.eval.final_episodes = 0  # the end-of-run evaluation has its own tests (tests/test_final_eval.py)
    cfg.transport.base_port = free_base_port(actors + 2) + 2  # weights sockets sit at base_port - 1 and - 2
    return cfg.validate()


@pytest.fixture
def make_config():
    return small_config


def mean_score(net, env_cfg, policy: str, episodes: int, seed: int) -> float:
    """Mean score (x_pos field: Snake's food, fuel breaks' cells saved) of ``episodes`` episodes at epsilon 0."""
    from actors.evaluator import play_episodes

    played = play_episodes(net, env_cfg, episodes, 0.0, seed=seed, policy=policy)
    return sum(e.x_pos for e in played) / len(played)


def clears_bar(greedy: float, random: float, bar: tuple[float, float]) -> bool:
    """``greedy`` beats ``random`` by at least ``bar[0]`` and by at least ``bar[1]`` times."""
    margin, ratio = bar
    return greedy >= random + margin and greedy >= ratio * random


def train_on_defaults(tmp_path, env_name: str, *budget: str, timeout: float) -> tuple[str, str]:
    """``python -m launch.local --env.name ENV BUDGET...`` on the shipped defaults (only the budget, e.g.
    ``--learner.steps N``, the run folder, ports and log interval set, ``--seed 0``: the seed the measured
    figures in docs/testing.md used, and no end-of-run evaluation: the tests play their own); asserts exit 0 and
    returns (console output, run folder). ``timeout`` only guards against a hang."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = free_base_port(6) + 2
    cmd = [sys.executable, "-m", "launch.local", "--env.name", env_name, "--seed", "0", "--eval.final-episodes", "0",
           *budget, "--log-every", "10", "--transport.base-port", str(base), "--run-dir", str(tmp_path), "--no-progress"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out, glob.glob(os.path.join(str(tmp_path), "*"))[0]
