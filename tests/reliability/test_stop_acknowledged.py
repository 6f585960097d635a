"""A stop waits for events, not seconds: an actor that acknowledged the stop is waited for until it exits (up to a
generous hang guard), however long its last batches take on a loaded machine; one that never acknowledges is still
terminated after the short wait. Real spawned processes."""

from launch.processes import ActorPool
from tests.support.failing_actor import deaf, slow_to_stop


def test_an_actor_that_acknowledged_the_stop_exits_cleanly_however_slow():
    pool = ActorPool(slow_to_stop, cfg=None, num_actors=2).start()
    assert pool.stop_all(timeout=10.0) == [0, 0]  # not terminated at 10 s (-15): both had said they were stopping


def test_an_actor_that_never_acknowledges_is_terminated_after_the_short_wait():
    pool = ActorPool(deaf, cfg=None, num_actors=1).start()
    assert pool.stop_all(timeout=2.0) == [-15]
