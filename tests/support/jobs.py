"""Module-level workers for the evaluation pool's tests (spawned processes import them by name)."""

import os
import signal


def square(job: dict) -> dict:
    """The job's ``n`` squared; a job with ``die`` SIGKILLs its worker first, once (``marker``: a file it leaves) or
    every time (no marker)."""
    if job.get("die"):
        marker = job.get("marker")
        if marker is None or not os.path.exists(marker):
            if marker is not None:
                open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    return {"value": job["n"] ** 2}


def exits_at_once(*_args) -> None:
    """An evaluation process body that ends as soon as it starts (a crash at start-up, over and over)."""
