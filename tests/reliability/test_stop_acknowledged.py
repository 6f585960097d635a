"""A stop waits for events, not seconds: an actor that acknowledged the stop is waited for until it exits (up to a
generous hang guard), however long its last batches take; one that never acknowledges is still terminated after the
short wait. Real spawned processes."""

import threading

from launch.processes import ActorPool, spawn_context
from tests.support.failing_actor import deaf, slow_to_stop
from tests.support.launcher import HANG_GUARD_S

SHORT_WAIT_S = 0.2  # the launcher's wait for an actor that did not acknowledge the stop, shortened for the test


def started_pool(target, actors: int, release=None):
    ctx = spawn_context()
    started = ctx.Queue()
    pool = ActorPool(target, cfg=(started, release if release is not None else ctx.Event()), num_actors=actors).start()
    for _ in range(actors):
        started.get(timeout=HANG_GUARD_S)  # every actor is up: a hang guard, not a deadline
    return pool


def test_an_actor_that_acknowledged_the_stop_exits_cleanly_however_slow():
    release = spawn_context().Event()
    pool = started_pool(slow_to_stop, 2, release)
    # the actors wind down only after 5 short waits: terminated at the short wait (-15) unless their acks count
    threading.Timer(5 * SHORT_WAIT_S, release.set).start()
    assert pool.stop_all(timeout=SHORT_WAIT_S) == [0, 0]


def test_an_actor_that_never_acknowledges_is_terminated_after_the_short_wait():
    pool = started_pool(deaf, 1)
    assert pool.stop_all(timeout=SHORT_WAIT_S) == [-15]
