"""A training run with saved-state starts (actors/starts.py) reports them apart from its true starts."""

import json
import re

from tests.support.launcher import TRAINING, run_fake


def test_a_fake_run_reports_its_saved_state_starts_apart_from_its_true_starts(tmp_path):
    out = run_fake(tmp_path, *TRAINING, "--learner.steps", "60", "--actor.start-share", "0.5", "--env.max-episode-steps", "40")
    assert re.search(r"Starts: \d+% saved \(\d+% hazard, \d+% frontier; Distance [\d.,]+, Flags \d+%\)", out), out
    (metrics,) = tmp_path.glob("*/metrics.jsonl")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.startswith("{")]
    last = [r for r in rows if "actor/starts_hazard" in r][-1]
    assert last["actor/starts_hazard"] + last["actor/starts_frontier"] > 0
    assert last["actor/starts_hazard"] + last["actor/starts_frontier"] < last["actor/episodes"]
