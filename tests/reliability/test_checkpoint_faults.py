"""Checkpoints that survive a damaged file or a failing disk: the previous checkpoint is kept beside the current
one, a truncated, garbage or foreign ``checkpoint.pt`` falls back to it (said, and set aside on a resume), a
resume with nothing readable is a clear error (``--resume latest`` starts a new run instead of dying on every
restart), and a save the disk refuses is printed while training goes on and tried again."""

import os
import subprocess
import sys

import pytest
import torch

from learner.checkpoint import (
    CHECKPOINT_NAME,
    DAMAGED_SUFFIX,
    PREVIOUS_NAME,
    load_checkpoint,
    save_checkpoint,
)
from learner.loop import Learner
from shared.resolution import resolve_run
from tests.support.launcher import resume_without_actors
from tests.support.paths import ROOT
from tests.support.runs import SMALL_LEARNER_SCRIPT, small_config


def _state(epoch: int) -> dict:
    return {
        "learner": {"w": torch.full((3,), float(epoch))},
        "config": "{}",
        "counters": {"epoch": epoch, "updates": 5 * epoch, "inserted": 100 * epoch},
    }


def _truncate(path: str) -> None:
    with open(path, "rb") as fh:
        data = fh.read()
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])


def _garbage(path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(os.urandom(4096))


def _foreign(path: str) -> None:
    torch.save([1, 2, 3], path)  # a readable torch file that is not a checkpoint


@pytest.mark.parametrize(
    "damage,fault", [(_truncate, "unreadable"), (_garbage, "unreadable"), (_foreign, "not a checkpoint"), (os.remove, "missing")]
)
def test_a_damaged_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path, damage, fault):
    run_dir = str(tmp_path)
    save_checkpoint(run_dir, _state(1))
    save_checkpoint(run_dir, _state(2))
    assert load_checkpoint(run_dir)["counters"]["epoch"] == 2
    assert torch.load(tmp_path / PREVIOUS_NAME, weights_only=True)["counters"]["epoch"] == 1
    damage(str(tmp_path / CHECKPOINT_NAME))
    said = []
    state = load_checkpoint(run_dir, say=said.append)
    assert state["counters"]["epoch"] == 1 and torch.equal(state["learner"]["w"], torch.ones(3))
    assert len(said) == 1 and said[0].startswith(f"[MAIN] {CHECKPOINT_NAME}: {fault}")
    assert f"loading {PREVIOUS_NAME} instead (epoch 1, 5 updates, 100 env steps)" in said[0]


def test_no_readable_checkpoint_names_both_faults(tmp_path):
    save_checkpoint(str(tmp_path), _state(1))
    save_checkpoint(str(tmp_path), _state(2))
    _garbage(str(tmp_path / CHECKPOINT_NAME))
    _truncate(str(tmp_path / PREVIOUS_NAME))
    with pytest.raises(
        ValueError, match=f"no readable checkpoint: {CHECKPOINT_NAME}: unreadable .*; {PREVIOUS_NAME}: unreadable"
    ):
        load_checkpoint(str(tmp_path))


# A real Learner writes two checkpoints (epochs 1 and 2) with the run's config.json, as a run does.
TWO_CHECKPOINTS = (
    SMALL_LEARNER_SCRIPT
    + r"""
for epoch in (1, 2):
    learner.counters.epoch, learner.counters.updates, learner.counters.weights_version = epoch, 5 * epoch, epoch
    learner.checkpoints.save()
learner.server.stop()
learner.plane.close()
"""
)


def test_resume_of_a_truncated_checkpoint_continues_from_the_previous_one(tmp_path):
    run_dir = str(tmp_path / "run")
    os.mkdir(run_dir)
    made = subprocess.run([sys.executable, "-c", TWO_CHECKPOINTS, run_dir], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    _truncate(os.path.join(run_dir, CHECKPOINT_NAME))
    out = resume_without_actors(run_dir)  # 5 updates are already done: it loads, saves and exits
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"[MAIN] {CHECKPOINT_NAME}: unreadable" in out.stdout, out.stdout
    assert f"loading {PREVIOUS_NAME} instead (epoch 1, 5 updates" in out.stdout, out.stdout
    assert "[MAIN] resumed at epoch 1, 5 updates" in out.stdout, out.stdout
    assert load_checkpoint(run_dir)["counters"]["updates"] == 5  # written again at exit
    assert load_checkpoint(run_dir)["counters"]["epoch"] == 1
    # the damaged file is kept aside, so the save at exit did not rotate it over the previous checkpoint
    assert os.path.getsize(os.path.join(run_dir, CHECKPOINT_NAME + DAMAGED_SUFFIX)) > 0
    assert torch.load(os.path.join(run_dir, PREVIOUS_NAME), weights_only=True)["counters"]["epoch"] == 1


def test_resume_with_nothing_readable_is_an_error_and_latest_starts_a_new_run(tmp_path):
    runs = tmp_path / "runs"
    run_dir = str(runs / "old")
    os.makedirs(run_dir)
    made = subprocess.run([sys.executable, "-c", TWO_CHECKPOINTS, run_dir], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        _garbage(os.path.join(run_dir, name))
    before = {name: os.path.getsize(os.path.join(run_dir, name)) for name in os.listdir(run_dir)}
    out = resume_without_actors(run_dir)
    assert out.returncode == 2 and f"error: resume={run_dir!r}" in out.stderr, out.stdout + out.stderr
    assert "has no readable checkpoint" in out.stderr
    cfg = small_config(actors=1, envs=1)  # a free port for the new run
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.local",
            "--resume",
            "latest",
            "--run-dir",
            str(runs),
            "--env.name",
            "fake",
            "--actors",
            "1",
            "--collect-only",
            "--no-progress",
            "--total-env-steps",
            "64",
            "--actor.batch-steps",
            "16",
            "--transport.base-port",
            str(cfg.transport.base_port),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"--resume latest: run folder {run_dir!r} has no readable checkpoint" in out.stdout, out.stdout
    assert "starting a new run (that folder is left as it is)" in out.stdout
    assert len(os.listdir(runs)) == 2  # the new run beside the old one
    assert {name: os.path.getsize(os.path.join(run_dir, name)) for name in os.listdir(run_dir)} == before


def test_a_save_the_disk_refuses_is_said_and_tried_again_while_training_goes_on(tmp_path):
    cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
    cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch = False, False, 16
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path))
    said = []
    learner.echo = said.append
    try:
        learner.counters.epoch = 1
        assert learner.checkpoints.save_or_say(learner.counters.epoch)
        good = (tmp_path / CHECKPOINT_NAME).read_bytes()
        # the temporary file's path taken by a folder: open() fails with a real OSError, as on a full disk
        obstacle = tmp_path / f"{CHECKPOINT_NAME}.tmp-{os.getpid()}"
        obstacle.mkdir()
        learner.counters.epoch = 2
        assert not learner.checkpoints.save_or_say(learner.counters.epoch) and learner.checkpoints.failed
        assert said[-1].startswith("[MAIN] checkpoint at epoch 2 failed (IsADirectoryError")
        assert said[-1].endswith("1 failed in a row); training goes on and the next epoch tries again")
        assert (tmp_path / CHECKPOINT_NAME).read_bytes() == good and not (tmp_path / PREVIOUS_NAME).exists()
        lines = len(said)
        learner.counters.epoch = 3  # failing again at once: counted, not said again (a full disk fails every epoch)
        assert not learner.checkpoints.save_or_say(learner.counters.epoch) and learner.checkpoints.failures == 2
        assert len(said) == lines
        obstacle.rmdir()
        learner.counters.epoch = 4
        assert learner.checkpoints.save_or_say(learner.counters.epoch) and not learner.checkpoints.failed
        assert said[-1] == "[MAIN] checkpoint at epoch 4 written after 2 failed"
        assert load_checkpoint(str(tmp_path))["counters"]["epoch"] == 4
        assert torch.load(tmp_path / PREVIOUS_NAME, weights_only=True)["counters"]["epoch"] == 1
    finally:
        learner.server.stop()
        learner.plane.close()
