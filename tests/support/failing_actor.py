"""The spawn target of tests/reliability/test_actor_backoff.py: an actor that cannot start (it exits with code 3)."""

import sys


def exit_at_once(cfg, slot, stop_event, report_queue, generation=0) -> None:
    sys.exit(3)
