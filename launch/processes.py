"""Actor process supervision: spawn, restart the dead, and stop every child for sure.

Children start by 'spawn' (no forked torch or sockets) with OMP/MKL threads at 1 and SIGINT blocked through exec, so
a Ctrl-C during their start-up never reaches them. Stopping escalates to SIGTERM and SIGKILL, so no child outlives the
launcher, after a wait long enough that a loaded machine does not turn a clean stop into a kill.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from shared.orphans import orphan_check  # noqa: F401  (the launchers' children import it from here)

_SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
QUICK_EXIT_S = 30.0  # an actor that exits sooner than this after its start counts as a failing start
BACKOFF_FIRST_S, BACKOFF_CAP_S = 0.5, 30.0  # the wait before the 2nd quick restart in a row, doubling up to the cap
STOP_GUARD_S = 180.0  # longest wait for a child that acknowledged the stop to exit: a hang guard, not a deadline


def spawn_context() -> Any:
    return mp.get_context("spawn")


def start_process(ctx: Any, target: Callable, args: tuple, name: str, kwargs: dict | None = None) -> Any:
    """Start ``target(*args, **kwargs)`` in a fresh process, math libraries on one thread, SIGINT blocked (module docstring)."""
    saved = {k: os.environ.get(k) for k in _SINGLE_THREAD_ENV}
    os.environ.update(_SINGLE_THREAD_ENV)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # this thread's; the child inherits it
    try:
        proc = ctx.Process(target=target, args=args, kwargs=kwargs or {}, name=name, daemon=False)
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGINT that came meanwhile is delivered now
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return proc


def stop_processes(
    procs: list, stop_event: Any, timeout: float = 10.0, while_waiting: Callable[[], Any] | None = None, acks: list | None = None
) -> list[int | None]:
    """Set ``stop_event``, wait for every process to exit (one that set its event in ``acks`` up to ``STOP_GUARD_S``,
    others ``timeout``), then SIGTERM, then SIGKILL; exit codes. ``while_waiting`` (short, blocking) keeps reading."""
    stop_event.set()
    start = time.monotonic()

    def waited_enough(i: int) -> bool:
        acknowledged = acks is not None and acks[i] is not None and acks[i].is_set()
        return time.monotonic() - start >= (STOP_GUARD_S if acknowledged else timeout)

    while True:
        alive = [i for i, p in enumerate(procs) if p is not None and p.is_alive()]
        if not alive or all(waited_enough(i) for i in alive):
            break
        if while_waiting is not None:
            while_waiting()
        else:
            procs[alive[0]].join(timeout=0.05)
    for p in (p for p in procs if p is not None):
        for end in (p.terminate, p.kill):  # the second only for one the first did not end
            if p.is_alive():
                end()
                p.join(timeout=2.0)
    return [None if p is None else p.exitcode for p in procs]


def backoff_delay(quick_exits: int) -> float:
    """Seconds before a child that exited ``quick_exits`` times in a row within QUICK_EXIT_S starts again: none after
    the first, then doubling from BACKOFF_FIRST_S up to BACKOFF_CAP_S (no spinning restarts)."""
    return 0.0 if quick_exits <= 1 else min(BACKOFF_FIRST_S * 2 ** (quick_exits - 2), BACKOFF_CAP_S)


class ActorPool:
    """N actor slots, each a process running ``target(cfg, slot, stop_event, report_queue, generation=G)``, G the
    slot's restarts so far (its exploration stream: a run repeated with the same seed explores the same way)."""

    def __init__(self, target: Callable, cfg: Any, num_actors: int, report_queue: Any = None):
        self.ctx, self.target, self.cfg, self.report_queue = spawn_context(), target, cfg, report_queue
        self.stop_event = self.ctx.Event()
        self.procs: list[Any] = [None] * num_actors
        self.restarts = [0] * num_actors
        self.quick_exits = [0] * num_actors  # per slot: exits within QUICK_EXIT_S of the start, in a row
        self.started_at = [0.0] * num_actors
        self.due: list[float | None] = [None] * num_actors  # per slot: when a dead actor is started again
        self.acks: list[Any] = [None] * num_actors  # per slot: set by its process once it has seen the stop

    def start(self) -> ActorPool:
        for slot in range(len(self.procs)):
            self._start(slot)
        return self

    def _start(self, slot: int) -> None:
        self.acks[slot] = self.ctx.Event()
        args = (self.cfg, slot, self.stop_event, self.report_queue)
        kwargs = {"generation": self.restarts[slot], "ack": self.acks[slot]}  # its exploration stream; its stop seen
        self.procs[slot] = start_process(self.ctx, self.target, args, f"actor-{slot}", kwargs)
        self.started_at[slot] = time.monotonic()

    def restart_delay(self, slot: int) -> float:
        """Seconds before ``slot`` starts again (``backoff_delay`` of its quick exits in a row)."""
        return backoff_delay(self.quick_exits[slot])

    def restart_dead(self, before_start: Callable[[int], None] | None = None) -> list[tuple[int, float]]:
        """Schedule a restart of every slot whose process exited (after ``restart_delay``), start those due; (slot, delay)s."""
        if self.stop_event.is_set():
            return []
        now, found = time.monotonic(), []
        for slot, p in enumerate(self.procs):
            if p is None or self.due[slot] is not None or p.is_alive():
                continue
            p.join(timeout=0)
            self.restarts[slot] += 1
            quick = now - self.started_at[slot] < QUICK_EXIT_S
            self.quick_exits[slot] = self.quick_exits[slot] + 1 if quick else 0
            delay = self.restart_delay(slot)
            self.due[slot] = now + delay
            found.append((slot, delay))
        for slot, due in enumerate(self.due):
            if due is not None and now >= due:
                self.due[slot] = None
                if before_start is not None:
                    before_start(slot)
                self._start(slot)
        return found

    def stop_all(self, timeout: float = 10.0, while_waiting: Callable[[], Any] | None = None) -> list[int | None]:
        """Ask every child to stop, wait (calling ``while_waiting``, see stop_processes), escalate; the exit codes."""
        return stop_processes(self.procs, self.stop_event, timeout, while_waiting, self.acks)
