"""Spawn targets standing in for actors in the process-supervision tests: one that cannot start (it exits with code
3), one slow to stop once it has seen the stop, one that never sees it."""

import sys
import time

SLOW_STOP_S = 12.0  # longer than the launcher's wait for a child that did not acknowledge the stop (10 s)


def exit_at_once(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    sys.exit(3)


def slow_to_stop(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    """Acknowledges the stop, then takes SLOW_STOP_S to wind down (a loaded machine's last batches), then exits 0."""
    stop_event.wait()
    ack.set()
    time.sleep(SLOW_STOP_S)


def deaf(cfg, slot, stop_event, report_queue, generation=0, ack=None) -> None:
    """Never looks at the stop (a hung actor)."""
    time.sleep(3600)
