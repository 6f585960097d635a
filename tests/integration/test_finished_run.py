"""A finished run stays finished: the same run started three times (a restarted learner, `--resume latest` under
Compose) writes one final evaluation; the later starts say so and exit 0, and a larger budget continues it. A final
evaluation whose results the disk refuses says so and the run exits 5 (launch/exits.py EXIT_UNWRITTEN)."""

import re

from launch.exits import EXIT_UNWRITTEN
from tests.support.launcher import TRAINING, run_fake

ROWS = ("--eval.late-episodes", "1", "--eval.low-epsilon-episodes", "1", "--eval.noop-episodes", "1")
FINAL = ("--eval.final-episodes", "2", "--eval.select-episodes", "2", *ROWS)


def test_a_finished_run_started_again_says_so_and_exits_0_without_evaluating(tmp_path):
    out = run_fake(tmp_path, *TRAINING, "--total-env-steps", "1500", *FINAL)
    assert "env-step budget" in out, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    result = (run_dir / "eval_final.json").read_bytes()
    mtime = (run_dir / "eval_final.json").stat().st_mtime_ns
    for _ in range(2):  # Compose's restarts: the run's own budget, resumed
        again = run_fake(tmp_path, "--resume", str(run_dir), *FINAL)
        finished = rf"\[MAIN\] {re.escape(str(run_dir))} is finished \([\d,]+ of --total-env-steps 1,500 env steps; "
        assert re.search(finished, again), again
        assert "[MAIN] Epoch" not in again and "[FINAL]" not in again, again  # neither trains nor evaluates
    assert (run_dir / "eval_final.json").read_bytes() == result
    assert (run_dir / "eval_final.json").stat().st_mtime_ns == mtime  # one final evaluation, never rewritten

    # a larger budget goes on; its final evaluation's result cannot be written (the temporary's path taken by a folder
    # fails as a full disk does): said, the figures still printed, the earlier result left as it was, exit 5
    (run_dir / "eval_final.json.tmp").mkdir()
    more = run_fake(tmp_path, "--resume", str(run_dir), "--total-env-steps", "2500", *FINAL, code=EXIT_UNWRITTEN)
    assert "is finished" not in more and "env-step budget" in more, more
    assert "[FINAL] eval_final.json not written (IsADirectoryError: " in more, more
    assert re.search(r"\[FINAL\] last \(v\d+, [\d,]+ env steps\): ", more), more
    assert "eval_final.json not written (see above)" in more, more
    assert (run_dir / "eval_final.json").read_bytes() == result
