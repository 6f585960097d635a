"""An actor that cannot start is restarted with a growing wait, not every 0.25 s: the first quick exit restarts
at once, each further one in a row waits twice as long as the last, from 0.5 s up to the 30 s cap, and the pool
starts it again only once that wait is over. Real processes (spawned, exiting with code 3)."""

import time

from launch.processes import BACKOFF_CAP_S, ActorPool
from tests.support.failing_actor import exit_at_once


def test_quick_exits_in_a_row_back_off_to_a_cap():
    pool = ActorPool(exit_at_once, cfg=None, num_actors=1).start()
    found = []
    try:
        deadline = time.monotonic() + 120
        while len(found) < 4 and time.monotonic() < deadline:
            dead = pool.procs[0]
            for slot, delay in pool.restart_dead():
                found.append(delay)
                assert dead.exitcode == 3
                if delay:  # scheduled, not started: the dead process is still the slot's
                    assert pool.procs[slot] is dead and pool.due[slot] is not None
                else:
                    assert pool.procs[slot] is not dead and pool.due[slot] is None
            time.sleep(0.05)
        assert found == [0.0, 0.5, 1.0, 2.0], found  # the waits asked for, not how long anything took
        assert pool.restarts == [4] and pool.quick_exits == [4]
        pool.quick_exits[0] = 20  # far into a crash loop: the wait stays at the cap
        assert pool.restart_delay(0) == BACKOFF_CAP_S
    finally:
        pool.stop_all(timeout=10)
