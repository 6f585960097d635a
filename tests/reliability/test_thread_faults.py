"""A learner service thread that dies ends the run with its name instead of a learner that waits for data forever:
the consolidation thread and the weight server each meet a fault on the next message they read (a real message
on a real socket; the fault itself is injected, since the code has no known one), the thread ends, and
``Learner.run`` raises ThreadDied naming the thread and the exception."""

import time

import pytest
import zmq

from learner.loop import Learner
from learner.thread_watch import ThreadDied
from shared.resolution import resolve_run
from shared.wire import protocol
from tests.support.runs import small_config


def _injected(*_args, **_kwargs):
    raise RuntimeError("injected fault")


@pytest.mark.parametrize("role", ["consolidation", "weight-server"])
def test_a_dead_service_thread_ends_the_learner_naming_it(tmp_path, role):
    cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
    cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch = False, False, 16
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path))
    ctx = zmq.Context.instance()
    if role == "consolidation":
        thread = learner.plane.consolidator
        thread._drain = _injected
        peer = ctx.socket(zmq.PUSH)
        peer.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
        message = [b"anything"]
    else:
        thread = learner.server
        thread._answer = _injected
        peer = ctx.socket(zmq.DEALER)
        peer.connect(protocol.weights_endpoints(cfg.transport)[1])
        message = protocol.encode_weights_request(0, 1, -1)
    learner.start()
    try:
        peer.send_multipart(message)
        thread.join(timeout=30)
        assert not thread.is_alive() and isinstance(thread.failure, RuntimeError)
        started = time.monotonic()
        with pytest.raises(ThreadDied, match=rf"the learner's {role} thread died \(RuntimeError: injected fault\)"):
            learner.run(deadline=started + 60)
        assert learner.counters.updates == 0
    finally:
        peer.close(linger=0)
        learner.close()
