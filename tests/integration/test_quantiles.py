"""A QR-DQN head (--net.quantiles) end to end: the learner trains it, the actors and the evaluator play its mean Q,
the checkpoint holds N quantiles per action, and a resume rebuilds the same head from the run's config."""

import glob
import json
import os

from learner.checkpoint import load_checkpoint
from shared.config_migration import read_config
from tests.support.launcher import run_fake

SMALL = (
    "--learner.no-compile",
    "--learner.micro-batch", "16",
    "--learner.accum-steps", "1",
    "--learner.min-replay", "300",
    "--learner.updates-per-epoch", "10",
    "--learner.broadcast-env-steps", "20",
    "--replay.capacity", "4096",
    "--eval.every-env-steps", "300",
    "--eval.episodes", "1",
    "--eval.final-episodes", "2",
)  # fmt: skip


def test_a_quantile_head_trains_plays_and_resumes(tmp_path):
    out = run_fake(tmp_path, *SMALL, "--net.quantiles", "4", "--learner.steps", "20")
    (run_dir,) = glob.glob(os.path.join(str(tmp_path), "*"))
    with open(os.path.join(run_dir, "config.json")) as fh:
        assert read_config(fh.read()).net.quantiles == 4
    online = load_checkpoint(run_dir)["learner"]["online"]
    assert online["value.2.weight"].shape[0] == 4 and online["advantage.2.weight"].shape[0] == 7 * 4  # fake: 7 actions
    assert "[MAIN] Eval at " in out and "evaluation process exited" not in out  # the evaluator played the mean Q
    with open(os.path.join(run_dir, "eval_final.json")) as fh:
        assert len(json.load(fh)["last"]["episodes"]) == 2  # the final evaluation's workers too
    out = run_fake(tmp_path, "--resume", run_dir, "--learner.steps", "30")  # the run's own head, from its config
    assert "[MAIN] resumed at epoch 2, 20 updates" in out and "[MAIN] Epoch 3 " in out, out
    assert load_checkpoint(run_dir)["counters"]["updates"] == 30
