"""A learner that dies between writing a checkpoint's temporary file and renaming it over checkpoint.pt:
the previous checkpoint stays whole and loadable (weights_only), the partial file is never read, and
``--resume`` of the folder works and removes the partial file."""

import glob
import os
import subprocess
import sys

import torch

from learner.checkpoint import CHECKPOINT_NAME, load_checkpoint
from tests.support.launcher import resume_without_actors
from tests.support.paths import ROOT
from tests.support.runs import SMALL_LEARNER_SCRIPT

# A real Learner writes a real checkpoint, trains on, and starts a second save that dies at the rename
# (os.replace is where the crash is simulated: the process ends there with no clean-up of any kind).
CRASHING_LEARNER = (
    SMALL_LEARNER_SCRIPT
    + r"""
learner.counters.epoch, learner.counters.updates, learner.counters.weights_version = 1, 5, 1
learner.checkpoints.save()
print("first saved", flush=True)
with torch.no_grad():
    for p in learner.dqn.online.parameters():
        p.add_(1.0)
learner.counters.epoch, learner.counters.updates, learner.counters.weights_version = 2, 10, 2
os.replace = lambda *a, **k: os._exit(17)  # the crash: after the temporary file is written, before the rename
learner.checkpoints.save()
print("unreachable", flush=True)
"""
)


def test_crash_before_rename_leaves_the_previous_checkpoint(tmp_path):
    run_dir = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_LEARNER, run_dir], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 17, proc.stdout + proc.stderr
    assert "first saved" in proc.stdout and "unreachable" not in proc.stdout
    (partial,) = glob.glob(os.path.join(run_dir, f"{CHECKPOINT_NAME}.tmp-*"))
    assert os.path.getsize(partial) > 0  # the second save got as far as its temporary file

    first = load_checkpoint(run_dir)  # torch.load(..., weights_only=True)
    assert (first["counters"]["epoch"], first["counters"]["updates"], first["counters"]["weights_version"]) == (1, 5, 1)
    crashed = torch.load(partial, weights_only=True)  # what a reader of the partial file would have got
    assert crashed["counters"]["updates"] == 10
    name = next(iter(first["learner"]["online"]))
    assert not torch.equal(first["learner"]["online"][name], crashed["learner"]["online"][name])

    # resume with nothing left to train: it loads the first checkpoint, removes the partial file, saves again
    out = resume_without_actors(run_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"[MAIN] removed {partial}" in out.stdout, out.stdout
    assert "[MAIN] resumed at epoch 1, 5 updates, weights v2" in out.stdout, out.stdout
    assert not glob.glob(os.path.join(run_dir, "*.tmp-*"))
    again = load_checkpoint(run_dir)
    assert again["counters"]["updates"] == 5 and again["counters"]["weights_version"] == 2
    for key, tensor in first["learner"]["online"].items():
        assert torch.equal(again["learner"]["online"][key], tensor), key
