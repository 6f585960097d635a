"""Checkpoint, stop, --resume: identical weights and optimizer state, counters and weights_version continue."""

import glob
import json
import os

import torch

from learner.checkpoint import load_checkpoint
from shared.config_migration import read_config
from tests.support.launcher import run_fake


def tensors_equal(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(tensors_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_resume_continues_weights_and_counters(tmp_path):
    run_fake(
        tmp_path,
        "--learner.no-compile",
        "--learner.micro-batch",
        "16",
        "--learner.accum-steps",
        "1",
        "--learner.min-replay",
        "300",
        "--learner.updates-per-epoch",
        "10",
        "--learner.broadcast-env-steps",
        "20",
        "--learner.steps",
        "30",
        "--replay.capacity",
        "4096",
        "--eval.final-episodes",
        "0",
    )
    (run_dir,) = glob.glob(os.path.join(str(tmp_path), "*"))
    first = load_checkpoint(run_dir)
    assert first["counters"]["updates"] == 30 and first["counters"]["epoch"] == 3
    v = first["counters"]["weights_version"]  # broadcasts follow env steps, which the actors' pace sets
    assert v >= 1

    # resume with nothing left to do: the checkpoint it writes holds exactly the loaded state
    out = run_fake(tmp_path, "--resume", run_dir, "--learner.steps", "30")
    assert f"[MAIN] resumed at epoch 3, 30 updates, weights v{v + 1}" in out, out
    same = load_checkpoint(run_dir)
    assert tensors_equal(same["learner"], first["learner"])  # nets, optimizer, scaler, update count
    assert same["counters"]["weights_version"] == v + 1  # bumped once: still strictly increasing

    # rows a learner wrote after its last checkpoint before it died describe lost training: they roll back
    inserted = same["counters"]["inserted"]
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as fh:
        fh.write(json.dumps({"step": 35, "env_steps": inserted + 500, "wall_seconds": 1.0}) + "\n")
        fh.write('{"step": 36, "env_st')  # cut short by the crash

    # resume and train on: counters continue from where they were
    out = run_fake(tmp_path, "--resume", run_dir, "--learner.steps", "50")
    assert f"[MAIN] resumed at epoch 3, 30 updates, weights v{v + 2}" in out, out
    assert f"[MAIN] 2 metrics rows past the checkpoint ({inserted:,} env steps) moved to" in out, out
    with open(os.path.join(run_dir, "metrics.rolled_back.jsonl")) as fh:
        assert [line.split(",")[0] for line in fh] == ['{"step": 35', '{"step": 36']
    assert "[MAIN] Epoch 4 - Loss:" in out and "[MAIN] Epoch 5 - Loss:" in out and "[MAIN] Epoch 1 " not in out
    last = load_checkpoint(run_dir)
    assert last["counters"]["updates"] == 50 and last["counters"]["epoch"] == 5
    assert last["counters"]["weights_version"] >= v + 2
    assert last["counters"]["samples_trained"] == 50 * 16
    assert not tensors_equal(last["learner"]["online"], first["learner"]["online"])
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        rows = [row for row in map(json.loads, fh) if "learner/loss" in row]  # epoch rows (probe rows: each broadcast)
    assert [row["step"] for row in rows] == [10, 20, 30, 40, 50]
    env_steps = [row["env_steps"] for row in rows]
    assert env_steps == sorted(env_steps)  # nothing goes back across the resume


def test_a_resume_after_a_stop_keeps_its_replay_and_does_not_explore_at_random_again(tmp_path):
    """A run stopped before its budget saves its replay beside the checkpoint; the resume reads it back (the stream
    layout matches), and its new actors take the run's age from the weights: the resume's first epoch with new
    batches has the replay of the stop and its actors' epsilon at their floors (at most the highest + 0.05)."""
    from shared.evaluation.names import read_metrics
    from shared.exploration import epsilon_floors
    from tests.support.launcher import EPOCH, HANG_GUARD_S, TRAINING, Launcher

    anneal = ("--actor.eps-anneal-env-steps", "400")  # 200 steps of each of the 2 actors' envs
    first = Launcher(tmp_path, *TRAINING, *anneal)
    try:
        first.wait_for(EPOCH, HANG_GUARD_S, count=6)
        first.stop()  # Ctrl-C: a stop before any budget
    finally:
        first.kill()
    assert first.proc.returncode == 0, first.output
    (run_dir,) = glob.glob(os.path.join(tmp_path, "*"))
    assert os.path.isfile(os.path.join(run_dir, "replay", "stamp.json"))  # complete (learner/replay/saved.py)
    stopped = load_checkpoint(run_dir)["counters"]
    new = stopped["inserted"] + 640  # the resume's budget: new batches must come in
    out = run_fake(tmp_path, "--resume", run_dir, "--total-env-steps", str(new))
    restored = [line for line in out.splitlines() if line.startswith("[MAIN] replay restored from")]
    assert restored, out
    size = int(restored[0].rsplit(": ", 1)[1].split()[0].replace(",", ""))
    assert size >= min(stopped["inserted"], 4096)  # what the stop held (with what its actors sent as they stopped)
    rows = read_metrics(os.path.join(run_dir, "metrics.jsonl"))[0]
    # the resume's first epoch with its actors' batches in it (before them, no actor's epsilon is known)
    epoch = next(r for r in rows if "replay/size" in r and r["env_steps"] > stopped["inserted"])
    assert epoch["replay/size"] >= size
    with open(os.path.join(run_dir, "config.json")) as fh:
        cfg = read_config(fh.read())
    # the mean over the actors heard in that epoch, each at its floor (0.4 and 0.05 here); one annealing again from
    # 1.0 over 200 steps would still be above 0.7 after its first 64-step batch
    highest = max(epsilon_floors(cfg.actor, cfg.actors, a).max() for a in range(cfg.actors))
    assert epoch["actor/epsilon"] <= highest + 0.05, epoch
