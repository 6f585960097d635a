"""The learner's service threads (consolidation, weight server) under watch: a thread that dies keeps its
exception, and the learner's loop ends the run with it (``ThreadDied``) instead of waiting for data forever."""

from __future__ import annotations

import threading


class ThreadDied(RuntimeError):
    """A learner service thread ended with an exception; the message names the thread and the exception."""


class SupervisedThread(threading.Thread):
    """A daemon thread that runs ``serve()`` and keeps the exception that ended it in ``failure``."""

    failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.serve()
        except BaseException as exc:
            self.failure = exc
            raise  # threading.excepthook prints the traceback as well

    def serve(self) -> None:
        raise NotImplementedError


def check_alive(threads: dict[str, SupervisedThread]) -> None:
    """Raise ThreadDied for the first started thread of ``threads`` ({role: thread}) that is no longer running."""
    for role, thread in threads.items():
        if thread.ident is not None and not thread.is_alive():
            why = f"{type(thread.failure).__name__}: {thread.failure}" if thread.failure is not None else "it returned"
            raise ThreadDied(f"the learner's {role} thread died ({why}); the run stops, its checkpoint is written")
