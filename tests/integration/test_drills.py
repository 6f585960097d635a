"""Drills end to end (shared/evaluation/drills.py): ``launch.evaluate --drills`` on Mario 1-1 with right+A held, as a
subprocess into its JSON, and the final evaluation's drill row (``eval.drill_trials``) from a fake-env run folder's
weights, in a pool, into ``eval_final.json``."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from launch.final_eval import final_evaluation
from learner.checkpoint import load_checkpoint, save_checkpoint
from shared.config import ConfigError, EnvConfig, RunConfig
from shared.envs.mario import HAZARDS
from shared.evaluation.drills import play_drills, wilson_interval
from shared.evaluation.episodes import build_network
from shared.evaluation.result import Drills, build, load_result
from shared.resolution import resolve_config
from shared.seeding import EVAL_DRILLS, stream_seed
from tests.support.paths import ROOT

NO_ROWS = ("--low-epsilon-episodes", "0", "--noop-episodes", "0")


def _adds_up(d: Drills, trials: int) -> None:
    for p in d.points:
        assert p.trials == trials and 0 <= p.passes <= trials and 0 <= p.forced_passes <= trials, p
        assert p.pass_rate == p.passes / trials and p.pass_rate_ci == list(wilson_interval(p.passes, trials))
        assert p.forced_pass_rate == p.forced_passes / trials and p.steps >= 2 * trials
    assert d.predicted_success_rate == pytest.approx(math.prod(p.pass_rate for p in d.points))


def test_launch_evaluate_drills_right_a_on_each_hazard_and_writes_them_into_its_json(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    out = tmp_path / "right-A.json"
    cmd = [sys.executable, "-m", "launch.evaluate", "--policy", "constant", "--action", "right+A", "--episodes", "1"]
    cmd += [*NO_ROWS, "--drills", "3", "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith("[DRILL] ")]
    names = [name for name, _, _ in HAZARDS["1-1"]]
    for name in names:  # a line per hazard: its plain and forced pass rates with their intervals
        (line,) = [s for s in said if s.startswith(f"[DRILL] {name} ")]
        assert " plain " in line and ", forced " in line and "/3)" in line, line
    assert any("the success rate the drills predict" in s for s in said), said
    data = json.loads(out.read_text())
    drills = build(Drills, data["drills"], "drills")
    assert [p.name for p in drills.points] == names and drills.trials == 3 and drills.lead == 12
    assert drills.epsilon == 0.05 and drills.seed == stream_seed(0, EVAL_DRILLS) and drills.reference["success"]
    _adds_up(drills, 3)


def _fake_run(folder) -> RunConfig:
    """A fake-env run folder as launch.local leaves one: config.json and a checkpoint of a fresh network."""
    os.makedirs(folder, exist_ok=True)
    cfg = RunConfig(seed=5, env=EnvConfig(name="fake", frame_size=36))
    cfg.eval.keep_snapshots, cfg.eval.keep_weights, cfg.eval.final_episodes = 0, 0, 1
    cfg.eval.low_epsilon_episodes, cfg.eval.noop_episodes = 0, 0
    cfg.eval.drill_trials, cfg.eval.drill_lead = 4, 5
    (folder / "config.json").write_text(cfg.to_json())
    torch.manual_seed(0)
    net = build_network(cfg.env).state_dict()
    counters = {"epoch": 1, "updates": 7, "weights_version": 9, "samples_trained": 70, "inserted": 900, "wall_seconds": 3.5}
    state = {"learner": {"online": net, "target": net, "updates": 7}, "counters": counters, "config": cfg.to_json()}
    save_checkpoint(str(folder), state)
    return cfg


def test_the_final_evaluation_drills_the_last_weights_into_eval_final_json(tmp_path):
    cfg = _fake_run(tmp_path)
    said: list[str] = []
    result = final_evaluation(str(tmp_path), processes=2, echo=said.append)  # a pool: one job per point and variant
    assert result is not None and result.drills is not None
    d = result.drills
    assert [p.name for p in d.points] == [
        "x256",
        "x512",
    ]  # the reference ends at 528 and (d.trials, d.lead, d.epsilon) == (4, 5, 0.05)
    assert d.seed == stream_seed(5, EVAL_DRILLS)
    _adds_up(d, 4)
    assert any(s.startswith("[FINAL] drill x256 ") for s in said), said
    assert load_result(str(tmp_path / "eval_final.json")).drills == d
    # the same drills in this process from the same weights: the pool changes nothing
    weights = load_checkpoint(str(tmp_path))["learner"]["online"]
    here = play_drills(cfg.env, 4, 0.05, d.seed, 5, weights=weights, net_cfg=cfg.net)
    assert here.points == d.points


def test_drills_are_refused_on_an_env_without_states():
    cfg = RunConfig(env=EnvConfig(name="catch"))
    cfg.eval.drill_trials = 3
    with pytest.raises(ConfigError, match="eval.drill_trials=3 .*catch"):
        resolve_config(cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "launch.evaluate", "--policy", "random", "--env.name", "catch", "--drills", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "--drills=2" in proc.stderr and "catch" in proc.stderr, proc.stderr
