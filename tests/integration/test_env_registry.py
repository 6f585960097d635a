"""The env registry (shared/envs/): built-in envs found by name, unknown ones named in the error, and an env
defined only in the tests (tests/support/plugin_env.py) trained through launch.local's real processes (and, in
``make test-all``, learned)."""

import glob
import json
import os
import subprocess
import sys

import pytest
import torch

from launch.cli import parse_run_config
from launch.tools.report import score_text
from learner.checkpoint import load_checkpoint
from shared.config import AUTO, ConfigError, EnvConfig, ReplayConfig, RunConfig
from shared.config_migration import read_config
from shared.envs import BUILTIN, EnvEntry, entry_for, env_spec, names, options, register
from shared.evaluation.episodes import build_network, play_episodes
from shared.resolution import resolve_config
from tests.support.learning import train_on_defaults
from tests.support.paths import ROOT
from tests.support.plugin_env import CorridorOptions

UPDATES = 5_000  # the learning test's budget: 100% in every run since the ratio is held (docs/lab/testing-log.md)
PLUMBING_UPDATES = 200
EPISODES = 64


def test_builtin_envs_are_found_by_name_and_unknown_ones_named():
    assert names()[:6] == ["mario", "catch", "fake", "snake", "fuelbreak", "gym"] == list(BUILTIN)
    for name in BUILTIN:
        assert entry_for(EnvConfig(name=name)).name == name
    with pytest.raises(ConfigError, match="env.name='pong' must be one of 'mario', 'catch'"):
        entry_for(EnvConfig(name="pong"))
    with pytest.raises(ConfigError, match="env.module='tests.support.nowhere' does not import"):
        entry_for(EnvConfig(name="corridor", module="tests.support.nowhere"))
    with pytest.raises(ConfigError, match=r"env.name='corridor2' .*env.module='tests.support.plugin_env' did not"):
        entry_for(EnvConfig(name="corridor2", module="tests.support.plugin_env"))


def test_a_second_env_of_one_name_is_refused():
    mario = entry_for("mario")
    register(mario)  # the same entry again: a module imported twice
    with pytest.raises(ValueError, match="env 'mario' is already registered"):
        register(EnvEntry("mario", spec=mario.spec, make=mario.make, action_names=mario.action_names))


def test_auto_settings_come_from_the_entry_in_one_step():
    raw = RunConfig(env=EnvConfig(name="fuelbreak"))
    assert (raw.actor.envs_per_actor, raw.learner.reward_scale) == (AUTO, AUTO)  # nothing filled in behind the scenes
    with pytest.raises(ConfigError, match="total_env_steps=-1 is still auto"):
        raw.validate()
    cfg = resolve_config(raw)
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_env_steps, cfg.learner.reward_scale) == (32, 128_000, 100.0)
    assert resolve_config(cfg) == cfg  # resolving twice changes nothing
    assert json.loads(cfg.to_json())["actor"]["envs_per_actor"] == 32  # what the run saves is resolved
    plugin = EnvConfig(name="corridor", module="tests.support.plugin_env")
    assert env_spec(plugin).obs_shape == (8,)
    corridor = resolve_config(RunConfig(env=plugin))
    assert (corridor.learner.reward_scale, corridor.replay.gamma, corridor.env.max_episode_steps) == (1.0, 0.95, 0)
    assert resolve_config(RunConfig(env=plugin, replay=ReplayConfig(gamma=0.5))).replay.gamma == 0.5  # set: kept


def test_a_plugin_env_declares_options_on_the_command_line_and_in_config_json():
    argv = ["--env.module", "tests.support.plugin_env", "--env.name", "corridor", "--env.corridor.step-cost", "0.5"]
    cfg = resolve_config(parse_run_config(argv))
    assert options(cfg.env, "corridor", CorridorOptions).step_cost == 0.5
    saved = json.loads(cfg.to_json())["env"]
    assert saved["corridor"] == {"step_cost": 0.5} and "options" not in saved  # env.corridor, as on the command line
    again = resolve_config(read_config(cfg.to_json()))
    assert options(again.env, "corridor", CorridorOptions) == CorridorOptions(step_cost=0.5)
    with pytest.raises(ConfigError, match="env.corridor.step_cost=2.0 must be in"):
        resolve_config(parse_run_config([*argv[:4], "--env.corridor.step-cost", "2"]))
    with pytest.raises(ConfigError, match="env.marioo: options for an env that is not registered"):
        resolve_config(RunConfig(env=EnvConfig(options={"marioo": {"stage": "1-2"}})))
    # without --env.module a fresh process does not know the plug-in's flags: tyro refuses them (exit 2)
    cmd = [sys.executable, "-m", "launch.local", "--env.corridor.step-cost", "0.5", "--collect-only"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "env.corridor.step-cost" in proc.stderr, proc.stderr[-2000:]


def train_corridor(tmp_path, updates: int, *extra: str) -> tuple[str, dict, RunConfig, torch.nn.Module]:
    """launch.local on the plug-in env, defaults, the ratio held (so every machine trains the same samples per
    transition; docs/lab/testing-log.md has the failures); checks what any such run must show, returns its output, checkpoint,
    config and the last weights' network rebuilt from that config."""
    out, run = train_on_defaults(
        tmp_path,
        "corridor",
        "--env.module",
        "tests.support.plugin_env",
        "--learner.steps",
        str(updates),
        "--learner.exact-ratio",
        *extra,
        timeout=800,
    )
    assert "on corridor (obs float32 8, stack 1, 2 actions, mlp net)" in out, out[:2000]
    assert "Return:" in out and "Shortest:" in out  # the entry's names for its score and success in the [MAIN] lines
    # nothing arrived too stale to train on (held sockets buffer about one batch, shared/links.held_kernel_buffer),
    # or the share of the data trained on would depend on timing
    assert "rejected by reason {}" in out, [line for line in out.splitlines() if "accounting" in line]
    state = load_checkpoint(run)
    cfg = read_config(state["config"])
    assert cfg.env.module == "tests.support.plugin_env" and state["counters"]["updates"] == updates
    return out, state, cfg, build_network(cfg.env, state["learner"]["online"], cfg.net)


@pytest.mark.timeout(900)  # a hang guard: the run ends on its update budget
def test_an_env_registered_outside_warppipe_trains_through_launch_local(tmp_path):
    """The plumbing: every process imports the module, the run trains its update budget, and the checkpoint's
    network, rebuilt from the saved config, plays the env. Learning is the extended test below."""
    extra = ("--env.corridor.step-cost", "0.5", "--eval.final-episodes", "20")  # and the end-of-run evaluation
    extra += ("--eval.late-episodes", "2", "--eval.low-epsilon-episodes", "4", "--eval.noop-episodes", "4")  # its rows
    _, _, cfg, net = train_corridor(tmp_path / "runs", PLUMBING_UPDATES, *extra)
    episodes = play_episodes(net, cfg.env, 8, 0.0, seed=5)
    assert len(episodes) == 8 and all(e.length > 0 for e in episodes)
    assert options(cfg.env, "corridor", CorridorOptions).step_cost == 0.5  # the plug-in's option, saved and read back
    # the plug-in's score is its return: random play pays 0.5 a step and reaches a goal at +1 (or never), so it is
    # negative in most episodes; launch.evaluate reads the run, imports the plug-in and reports it as it is
    run_dir = glob.glob(str(tmp_path / "runs" / "*"))[0]
    out_json = tmp_path / "random.json"
    cmd = [sys.executable, "-m", "launch.evaluate", run_dir, "--policy", "random", "--episodes", "40", "--json", str(out_json)]
    cmd += ["--low-epsilon-episodes", "4", "--noop-episodes", "4"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(out_json.read_text())
    assert summary["summary"]["score_mean"] < 0 and summary["summary"]["score_min"] <= -0.5, summary["summary"]
    # the end-of-run evaluation and launch.tools.report took it too, its score printed as the return it is
    last = json.loads((tmp_path / "runs" / os.path.basename(run_dir) / "eval_final.json").read_text())["last"]["summary"]
    proc = subprocess.run([sys.executable, "-m", "launch.tools.report", run_dir], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [line for line in proc.stdout.splitlines() if f"| {os.path.basename(run_dir)} (" in line]  # the per-run row
    assert f"| {score_text(last['score_mean'])} [" in row, (row, last)  # the return, negative and with its decimals


@pytest.mark.extended  # minutes of learner updates on a tiny network (about 185 s on a slow host): make test-all
@pytest.mark.timeout(900)  # a hang guard: the run ends on its update budget
def test_an_env_registered_outside_warppipe_is_learned(tmp_path, record_property):
    out, state, cfg, net = train_corridor(tmp_path, UPDATES)
    greedy = play_episodes(net, cfg.env, EPISODES, 0.0, seed=5)
    torch.manual_seed(cfg.learner.seed)  # the learner's initial network (learner/trainer.py seeds it so)
    untrained = play_episodes(build_network(cfg.env), cfg.env, EPISODES, 0.0, seed=5)
    rate = sum(e.success for e in greedy) / EPISODES
    before = sum(e.success for e in untrained) / EPISODES
    record_property(
        "figures",
        f"corridor plug-in after {UPDATES} updates, {state['counters']['inserted']:,} "
        f"transitions: shortest path in {rate:.0%} of {EPISODES} episodes (untrained {before:.0%})",
    )
    assert before < 0.9, f"the check does not tell learning: the untrained network already scores {before:.0%}"
    assert rate == 1.0, f"greedy took the shortest path in {rate:.0%} of episodes\n{out[-3000:]}"


def test_launch_evaluate_plays_a_plugin_env_named_with_its_module_and_names_it_when_unknown(tmp_path):
    """Without a run folder, ``--env.module`` imports the plug-in before ``--env.name`` is looked up (a fresh process:
    nothing registered it before), and its options are flags; without it the name is unknown and the error says so."""
    out_json = tmp_path / "random.json"
    common = [sys.executable, "-m", "launch.evaluate", "--policy", "random", "--env.name", "corridor", "--episodes", "10"]
    plugin = ["--env.module", "tests.support.plugin_env", "--env.corridor.step-cost", "0.5", "--json", str(out_json)]
    proc = subprocess.run(common + plugin, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out_json.read_text())
    assert data["env"]["name"] == "corridor" and data["env"]["module"] == "tests.support.plugin_env"
    assert data["env"]["corridor"]["step_cost"] == 0.5  # the plug-in's own option, given as a flag
    scores = [e["score"] for e in data["episodes"]]  # the corridor's return: 1 at the goal less 0.5 a step
    assert data["summary"]["episodes"] == len(scores) == 10 and data["summary"]["score_min"] == min(scores) < 1
    proc = subprocess.run(common, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: env.name='corridor' must be one of"), proc.stderr
