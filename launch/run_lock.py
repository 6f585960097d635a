"""One learner per run folder: an advisory lock (``fcntl.flock``) on ``learner.lock`` held for the learner's life.

A second learner started on the same folder exits 2 naming the first's pid instead of training beside it (interleaved
metrics, each deleting the other's temporary checkpoint). The kernel drops the lock when its holder dies, however it
dies, so a crashed learner never leaves the folder locked.
"""

from __future__ import annotations

import fcntl
import os

from shared.errors import ConfigError

LOCK_NAME = "learner.lock"


class RunFolderBusy(ConfigError):
    """Another live process holds the run folder's lock."""


class RunFolderLock:
    """``acquire()`` takes the folder's lock (RunFolderBusy names the holder's pid when another process has it) and
    writes this pid into the lock file; ``release()`` (or this process's exit) lets it go."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self) -> RunFolderLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunFolderBusy(
                f"run folder {os.path.dirname(self.path)} is in use by the learner with pid {holder}: one learner per run "
                "folder (stop it first, or start a new run)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
