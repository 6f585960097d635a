"""Failed starts counted per checkpoint, so a failure that restarting cannot cure stops instead of looping.

A start that ends on an error records ``failures.json`` in its run folder: the checkpoint it started from (its
epoch and updates: a failed start still takes in experience, never an update past the failure), the error in one
line, and how many starts in a row from that checkpoint ended on that same error. After ``REPEATS_TO_STOP`` of them
the learner exits ``EXIT_REPEATED`` with a line, and every later start from the same checkpoint does so at once (a
restart policy that restarts on any failure stops looping); a start from a newer checkpoint, or one ending on another
error, counts afresh. Removing the file tries again.
"""

from __future__ import annotations

import contextlib
import json
import os

from shared.writes import write_atomic

FAILURES_NAME = "failures.json"
REPEATS_TO_STOP = 3  # identical failed starts from one checkpoint before the learner stops trying
EXIT_REPEATED = 3  # the learner's exit code for a failure repeated from one checkpoint (1: a failure, 2: bad config)


def checkpoint_stamp(resume_state: dict | None) -> list[int]:
    """The checkpoint a start begins from, by its training counters (epoch, updates); [] for a new run."""
    if resume_state is None:
        return []
    c = resume_state["counters"]
    return [int(c.get("epoch", 0)), int(c.get("updates", 0))]


def error_line(exc: BaseException) -> str:
    """The error as compared between starts: its type and first line, at most 200 characters."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def _read(run_dir: str) -> dict:
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(run_dir, FAILURES_NAME)) as fh:
            record = json.load(fh)
        if isinstance(record, dict) and isinstance(record.get("count"), int):
            return record
    return {}


def record_failure(run_dir: str, stamp: list[int], error: str) -> int:
    """Count a start from checkpoint ``stamp`` that ended on ``error``; how many in a row ended so (1: a new one)."""
    last = _read(run_dir)
    same = last.get("checkpoint") == stamp and last.get("error") == error
    count = last["count"] + 1 if same else 1
    with contextlib.suppress(OSError):  # a full disk: this start is not counted, the next is
        write_atomic(os.path.join(run_dir, FAILURES_NAME), json.dumps({"checkpoint": stamp, "error": error, "count": count}))
    return count


def repeated_line(run_dir: str, stamp: list[int]) -> str:
    """The line a start from checkpoint ``stamp`` stops with when its last starts failed alike, else ''."""
    last = _read(run_dir)
    if last.get("checkpoint") != stamp or last.get("count", 0) < REPEATS_TO_STOP:
        return ""
    where = f"epoch {stamp[0]}, {stamp[1]:,} updates" if stamp else "the run's start"
    return (
        f"error: {last['count']} starts of {run_dir} from its checkpoint ({where}) ended on the same error, "
        f"{last['error']!r}; not starting again (exit {EXIT_REPEATED}). Remove {os.path.join(run_dir, FAILURES_NAME)} "
        "to try again"
    )


def clear_failures(run_dir: str) -> None:
    """Forget the failed starts: this start trained past them (its checkpoint moved on) or ended cleanly."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(run_dir, FAILURES_NAME))
