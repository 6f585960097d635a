"""The in-training evaluation process is supervised like an actor: one that exits at once, again and again, is
restarted at once the first time, then after 0.5 s, 1 s, 2 s ... (launch/processes.py ``backoff_delay``), each wait
said, instead of being respawned on every tick."""

import re
import time

from launch.local import Evaluator
from learner.loop import Learner
from shared.resolution import resolve_run
from tests.support.jobs import exits_at_once
from tests.support.launcher import HANG_GUARD_S
from tests.support.runs import small_config


def test_an_evaluator_that_keeps_exiting_is_restarted_with_a_doubling_wait(tmp_path):
    cfg = small_config(actors=1, envs=1)
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path))
    lines: list[str] = []
    learner.echo = lines.append
    evaluator = Evaluator(cfg, learner, target=exits_at_once)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while sum("evaluation process exited" in line for line in lines) < 4 and time.monotonic() < deadline:
            evaluator.tick()
            time.sleep(0.02)
    finally:
        evaluator.stop()
        learner.close()
    exits = [line for line in lines if "evaluation process exited" in line]
    assert exits[0] == "[MAIN] the evaluation process exited (0); restarting", exits
    waits = [re.search(r"restarting in ([\d.]+)s \(its exit (\d+) in a row", line).groups() for line in exits[1:4]]
    assert waits == [("0.5", "2"), ("1", "3"), ("2", "4")], exits
