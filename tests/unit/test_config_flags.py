"""The launchers' own options beside the run's (issue 85 item 5): ``--print-config`` prints every value a start would
use, no auto left, and starts nothing; ``--config RUN`` starts a new run on a saved run's settings, the command line's
options over them; a bad ``--config`` is named and exits 2."""

import json
import os
import re
import subprocess
import sys

import pytest

from launch import learner, local
from launch.cli import parse_launch
from launch.exits import StopSignals
from launch.resolved_config import resolved_document
from shared.config import AUTOS, ConfigError, EnvConfig, LearnerConfig, RunConfig
from shared.cpus import learner_threads
from shared.resolution import resolve_config, resolve_run
from tests.support.paths import ROOT

SAVED_SEED, SAVED_LR = 11, 1e-4  # the saved run's, both away from the defaults


class NoSignals(StopSignals):
    """Stop signals that leave the test process's handlers alone."""

    def install(self) -> StopSignals:
        return self


def autos_in(value, path: str = "") -> list[tuple[str, object]]:
    """Every (dotted path, value) of a parsed JSON document still at an auto: -1 or 'auto'."""
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in autos_in(item, f"{path}.{key}" if path else key)]
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in autos_in(item, f"{path}[{i}]")]
    return [] if isinstance(value, bool) or value not in AUTOS else [(path, value)]


def printed(monkeypatch, capsys, program, *argv: str) -> dict:
    """``program.main(["--print-config", *argv])`` in this process, its stdout parsed; it must exit 0 and start no run."""
    monkeypatch.setattr(program, "StopSignals", NoSignals)
    monkeypatch.setattr(program, "run", lambda *args: pytest.fail("--print-config started a run"))
    monkeypatch.delenv("WARPPIPE_ARGS", raising=False)
    assert program.main(["--print-config", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def saved_run(tmp_path, **changes) -> str:
    """A run folder whose config.json holds a resolved fake-env run of seed 11 and lr 1e-4 (and ``changes``)."""
    folder = tmp_path / "saved"
    folder.mkdir()
    cfg = resolve_config(RunConfig(seed=SAVED_SEED, env=EnvConfig(name="fake"), learner=LearnerConfig(lr=SAVED_LR), **changes))
    (folder / "config.json").write_text(cfg.to_json())
    return str(folder)


def test_the_walk_finds_an_auto():
    assert autos_in({"a": {"b": -1, "c": [1, "auto"]}, "d": True, "e": -1.0}) == [("a.b", -1), ("a.c[1]", "auto"), ("e", -1.0)]


def test_print_config_prints_every_value_resolved_and_starts_nothing(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    doc = printed(monkeypatch, capsys, local, "--env.name", "fake", "--actors", "2", "--run-dir", str(runs))
    assert autos_in(doc) == []
    assert not runs.exists() and os.listdir(tmp_path) == []  # no run folder
    assert doc["actors"] == 2 and doc["seed"] >= 0 and doc["actor"]["seed"] == doc["seed"]  # a seed drawn, followed
    assert doc["device"] in ("cpu", "cuda") and doc["learner"]["micro_batch"] in (64, 512)  # the device's autos
    assert doc["learner"]["threads"] == learner_threads(-1, 2) and doc["learner"]["amp"] == "off"
    assert doc["actor"]["eps_anneal_env_steps"] == 100_000 and doc["actor"]["epsilon"] == "schedule"
    assert doc["replay"]["priority_beta_steps"] == 500_000  # the fake env has no budget
    learner_doc = printed(monkeypatch, capsys, learner, "--env.name", "fake", "--actors", "2")  # launch.learner too
    assert autos_in(learner_doc) == [] and learner_doc["spawn_actors"] is False
    assert learner_doc["learner"]["threads"] == learner_threads(-1, 0)  # no local actors to leave cores to


def test_print_config_as_a_program_prints_json_alone_on_stdout_and_exits_0(tmp_path):
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "launch.local", "--print-config", "--env.name", "fake", "--run-dir", str(runs)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert autos_in(json.loads(proc.stdout)) == [] and not runs.exists()
    assert "drawn for this print" in proc.stderr  # what is said goes to stderr


def test_a_printed_config_starts_a_run_on_the_same_values(tmp_path, monkeypatch, capsys):
    first = printed(monkeypatch, capsys, local, "--env.name", "fake", "--seed", "3", "--learner.lr", "0.001")
    (tmp_path / "printed.json").write_text(json.dumps(first))
    cfg = parse_launch(["--config", str(tmp_path / "printed.json")]).cfg
    assert (cfg.seed, cfg.learner.lr, cfg.actor.epsilon) == (3, 0.001, -1.0)  # 'schedule' reads back as the schedule
    assert resolved_document(resolve_run(cfg, fresh=True)) == first
    capsys.readouterr()  # parse_launch's "--config" line, said on stdout without --print-config
    assert printed(monkeypatch, capsys, local, "--config", str(tmp_path / "printed.json")) == first


def test_config_starts_a_new_run_on_the_saved_settings_and_seed_with_the_command_line_over_them(tmp_path, capsys):
    run = saved_run(tmp_path, resume="runs/an-earlier-one")  # a resumed run's config.json names its folder
    kept = parse_launch(["--config", run]).cfg  # a run folder: its config.json
    assert (kept.learner.lr, kept.seed, kept.resume, kept.env.name) == (SAVED_LR, SAVED_SEED, "", "fake")  # a new run
    assert resolve_config(kept).actor.seed == SAVED_SEED
    assert f"[MAIN] --config {run}: a new run on its settings, the saved seed {SAVED_SEED}" in capsys.readouterr().out
    reseeded = resolve_config(parse_launch(["--config", os.path.join(run, "config.json"), "--seed", "5"]).cfg)
    assert (reseeded.seed, reseeded.actor.seed, reseeded.learner.seed, reseeded.eval.seed) == (5, 5, 5, 5)
    assert reseeded.learner.lr == SAVED_LR  # not given: the saved run's
    default_lr = RunConfig().learner.lr
    over = parse_launch(["--config", run, "--learner.lr", str(default_lr), "--actors", "8", "--env.fake.actions", "5"])
    got = resolve_config(over.cfg)
    assert (got.learner.lr, got.actors, got.seed) == (default_lr, 8, SAVED_SEED)  # given at its default too: it wins
    assert got.env.options["fake"].actions == 5
    assert f"--learner.lr {default_lr!r} (saved: {SAVED_LR!r})" in capsys.readouterr().out
    other = resolve_config(parse_launch(["--config", run, "--env.name", "snake"]).cfg)
    assert (other.env.name, other.learner.reward_scale) == ("snake", 0.1)  # the new env's autos, not the saved env's


@pytest.mark.parametrize(
    "case,needle",
    [
        ("missing", "config='{path}' does not exist"),
        ("folder", "config='{path}' is a folder without config.json"),
        ("text", "config='{path}' is not a run's config.json"),
        ("other json", "config='{path}' is not a run's config.json (no env, actor, learner sections)"),
        ("unknown key", "config='{path}': unknown config key(s) for RunConfig: ['bogus']"),
    ],
)
def test_a_config_that_names_no_runs_settings_is_named_and_exits_2(tmp_path, monkeypatch, capsys, case, needle):
    path = tmp_path / "given"
    if case == "folder":
        path.mkdir()
    elif case == "text":
        path.write_text("not a config\n")
    elif case == "other json":
        path.write_text(json.dumps({"actors": 4}))
    elif case == "unknown key":
        path.write_text(json.dumps({"env": {}, "actor": {}, "learner": {}, "bogus": 1}))
    message = needle.format(path=path)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_launch(["--config", str(path)])
    monkeypatch.setattr(local, "StopSignals", NoSignals)
    monkeypatch.setattr(local, "run", lambda *args: pytest.fail("a bad --config started a run"))
    assert local.main(["--config", str(path)]) == 2
    assert f"error: {message}" in capsys.readouterr().err


def test_config_refuses_resume_and_the_anneals_old_option_is_named(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("resume='latest': --config starts a new run")):
        parse_launch(["--config", saved_run(tmp_path), "--resume", "latest"])
    with pytest.raises(ConfigError, match=re.escape("--config needs a value")):
        parse_launch(["--config"])
    with pytest.raises(ConfigError, match=re.escape("--actor.eps-anneal-steps is now --actor.eps-anneal-env-steps")):
        parse_launch(["--actor.eps-anneal-steps", "7143"])
