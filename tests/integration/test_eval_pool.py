"""The evaluation pool (shared/evaluation/protocol.py ``run_jobs``): a worker killed mid-job no longer hangs the final
evaluation. Its jobs go to a fresh pool and every result comes back in job order; a job that kills its worker every
time is named after ``POOL_ATTEMPTS`` pools."""

import re

import pytest

from shared.evaluation.protocol import POOL_ATTEMPTS, run_jobs
from tests.support.jobs import square


def test_a_killed_worker_s_jobs_are_played_again_in_a_fresh_pool(tmp_path):
    jobs = [{"n": n} for n in range(6)]
    jobs[2] |= {"die": True, "marker": str(tmp_path / "died")}
    assert [r["value"] for r in run_jobs(jobs, 2, square)] == [n * n for n in range(6)]
    assert (tmp_path / "died").exists()  # the worker did die once


def test_a_job_that_kills_every_worker_is_named():
    jobs = [{"n": n} for n in range(4)]
    jobs[1] |= {"die": True}
    with pytest.raises(
        RuntimeError, match=rf"evaluation jobs \[[0-9, ]*\] of 4 lost their worker process in {POOL_ATTEMPTS}"
    ) as info:
        run_jobs(jobs, 2, square)
    assert "1" in re.search(r"\[([0-9, ]*)\]", str(info.value)).group(1).split(", ")
