"""A learner slower than its actors holds the replay ratio: the actors wait, nothing is dropped.

On the fake env two actors make thousands of transitions per second, and a learner at 4 samples per
transition (micro-batch 16: one update per 4 transitions) consumes tens: without ``learner.exact_ratio``
it would train far below the ratio and the actors' staging would overflow. Bounded by env steps (the
budget), not by time: on a slow machine the run only takes longer.
"""

import re

import torch

from tests.support.launcher import FAKE_BATCH, STOPPED, TRAINING, last_line, run_to_the_end

SPI, SLACK, BUDGET = 4, 256, 1500  # about 300 updates (the learner may trail by SLACK): its work sets the test's time


def test_a_learner_slower_than_its_actors_holds_the_ratio_and_the_actors_wait_without_dropping(tmp_path):
    # a broadcast every 200 transitions (about 3 batches): the batches waiting in the sockets stay within
    # learner.max_weights_lag (8) broadcasts of the learner's weights
    _, out = run_to_the_end(
        tmp_path,
        *TRAINING,
        "--learner.broadcast-env-steps",
        "200",
        "--learner.exact-ratio",
        "--learner.samples-per-insert",
        str(SPI),
        "--learner.ratio-slack",
        str(SLACK),
        "--total-env-steps",
        str(BUDGET),
        collect_only=False,
    )
    assert re.match(STOPPED + r"env-step budget: ", last_line(out)), out
    assert f"replay ratio held at {SPI} samples per transition (within {SLACK} transitions" in out, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    c = torch.load(run_dir / "checkpoint.pt", weights_only=True)["counters"]
    ratio = c["samples_trained"] / c["inserted"]
    print(f"\n{c['inserted']:,} env steps, {c['updates']:,} updates: {ratio:.2f} samples per transition (held at {SPI})")
    assert c["inserted"] >= BUDGET, c
    assert SPI * (1 - (SLACK + FAKE_BATCH) / c["inserted"]) <= ratio <= SPI, c  # within the slack and one batch
    accounting = re.search(r"\[MAIN\] accounting: .* accepted (\d+), rejected (\d+), duplicates \d+, gaps \d+;", out)
    assert accounting and int(accounting[1]) > 0, out
    assert accounting[2] == "0", out  # no batch too stale
    # while the run trained, no seq went missing (the accounting's gaps also count batches cut off at shutdown:
    # one fresh-clone run ended with 2 after 57 accepted)
    running = out[: accounting.start()]
    drops = re.findall(r"\[PROCESSOR\] .*Drops: ([\d,]+),", running)
    assert drops and set(drops) == {"0"}, out
