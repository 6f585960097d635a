"""Spawn targets standing in for actors in the process-supervision tests: one that cannot start (it exits with code
3), one slow to stop once it has seen the stop, one that never sees it. ``cfg`` carries their test's events."""

import sys
import threading


def exit_at_once(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    sys.exit(3)


def slow_to_stop(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    """Says it started (``cfg[0]``, a queue), acknowledges the stop, then winds down only once ``cfg[1]`` (an event)
    is set: an actor whose last batches take longer than the launcher's short wait, then exits 0."""
    started, release = cfg
    started.put(slot)
    stop_event.wait()
    ack.set()
    release.wait()


def deaf(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    """Says it started (``cfg[0]``), then never looks at the stop (a hung actor)."""
    cfg[0].put(slot)
    threading.Event().wait()
