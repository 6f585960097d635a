"""The weight channel over real sockets: request at start, broadcasts between steps, bad messages ignored, replies
only to peers behind and at most once per REPLY_EVERY per connection."""

import time

import msgpack
import numpy as np
import pytest
import torch
import zmq

from actors.weights_client import WeightClient
from learner.weight_server import REPLY_EVERY, WeightServer, state_arrays, weights_endpoints
from shared.config import ConfigError, TransportConfig
from shared.wire import protocol
from tests.support.networks import nets
from tests.support.runs import free_base_port


def assert_same(a, b):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_encode_decode_round_trip_keeps_every_shape_including_scalars():
    net, other = nets()
    expected = {
        n: (tuple(t.shape), np.dtype(np.float32 if t.is_floating_point() else np.int64).str)
        for n, t in other.state_dict().items()
    }
    frames = [bytes(memoryview(f)) for f in protocol.encode_weights(5, state_arrays(net), run=77, env_steps=123_456)]
    run, version, arrays, env_steps = protocol.decode_weights(frames, expected)
    assert (run, version, env_steps) == (77, 5, 123_456)
    for bad in (0, -1, "77"):  # a run identity is a positive int
        header = msgpack.unpackb(frames[0], raw=False) | {"run": bad}
        with pytest.raises(protocol.ProtocolError, match=f"run={bad!r}"):
            protocol.decode_weights([msgpack.packb(header, use_bin_type=True), *frames[1:]], expected)
    assert arrays["features.1.num_batches_tracked"].shape == ()
    other.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in arrays.items()})
    assert_same(net, other)


def test_actor_gets_current_weights_on_request_then_broadcasts():
    transport = TransportConfig(base_port=free_base_port(3) + 2)
    learner_net, actor_net = nets()
    server = WeightServer(transport)
    server.publish(3, learner_net)
    server.start()
    client = WeightClient(transport, 0, 1, actor_net)
    try:
        version, arrays = client.fetch(have=-1, timeout=10)
        assert version == 3
        actor_net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in arrays.items()})
        assert_same(learner_net, actor_net)
        with torch.no_grad():
            learner_net.advantage[2].bias.add_(1.0)
        got, have = None, 3
        deadline = time.monotonic() + 60  # a hang guard
        while have < 5 and time.monotonic() < deadline:  # v4 and v5 may come in one poll or two
            if got is None:  # until the subscription has reached the publisher (ZeroMQ's slow joiner), publish again
                server.publish(4, learner_net)
                server.publish(5, learner_net)  # only the newest matters
            for _ in range(10):
                newer = client.poll(have=have)
                if newer is not None:
                    assert newer[0] > have
                    got, have = newer, newer[0]
                time.sleep(0.02)
        assert got is not None and got[0] == 5
        assert np.array_equal(got[1]["advantage.2.bias"], learner_net.advantage[2].bias.detach().numpy())
        assert client.poll(have=got[0]) is None
        assert client.rejected == 0
    finally:
        client.close()
        server.stop()


def test_malformed_requests_are_counted_and_do_not_stop_the_server():
    transport = TransportConfig(base_port=free_base_port(3) + 2)
    learner_net, actor_net = nets()
    server = WeightServer(transport)
    server.publish(1, learner_net)
    server.start()
    bad = zmq.Context.instance().socket(zmq.DEALER)
    bad.setsockopt(zmq.LINGER, 0)
    bad.connect(weights_endpoints(transport)[1])
    client = WeightClient(transport, 0, 1, actor_net)
    try:
        for junk in ([b"\x00garbage"], [b"\x81\xa1v\x01", b"extra"], [protocol.encode_weights_request(0, 1, 0)[0][:-2]]):
            bad.send_multipart(junk)
        got = client.fetch(have=-1, timeout=10)
        assert got is not None and got[0] == 1
        deadline = time.monotonic() + 60  # a hang guard
        while server.bad_requests < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.bad_requests == 3
    finally:
        bad.close()
        client.close()
        server.stop()


def test_an_actor_takes_a_new_runs_weights_whatever_their_version():
    """The learner starts over (a new run, as after a death before its first checkpoint): its v1 replaces the
    v8 the actor holds, while within one run only a higher version is taken."""
    transport = TransportConfig(base_port=free_base_port(3) + 2)
    learner_net, actor_net = nets()
    old = WeightServer(transport, run=111)
    old.publish(8, learner_net)
    old.start()
    client = WeightClient(transport, 0, 1, actor_net)
    new = None
    try:
        assert client.fetch(have=-1, timeout=10)[0] == 8 and client.run == 111
        old.stop()
        with torch.no_grad():
            learner_net.advantage[2].bias.add_(1.0)
        deadline = time.monotonic() + 60  # a hang guard: ZeroMQ lets the closed sockets' ports go asynchronously
        while new is None:
            try:
                new = WeightServer(transport, run=222)
            except ConfigError:
                assert time.monotonic() < deadline, "the old server's ports were never freed"
                time.sleep(0.1)
        new.publish(1, learner_net)
        new.start()
        got, deadline = None, time.monotonic() + 60  # a hang guard
        while got is None and time.monotonic() < deadline:
            new.rebroadcast()  # until the subscription has reached the new publisher (ZeroMQ's slow joiner)
            time.sleep(0.05)
            got = client.poll(have=8)
        assert got is not None and got[0] == 1 and client.run == 222
        assert np.array_equal(got[1]["advantage.2.bias"], learner_net.advantage[2].bias.detach().numpy())
        new.rebroadcast()  # the same run's same version again: nothing to take
        time.sleep(0.2)
        assert client.poll(have=1) is None and client.run == 222
    finally:
        client.close()
        if new is not None:
            new.stop()
        old.stop()


class FrozenClock:
    """The weight server's clock, moved only by the test: REPLY_EVERY is counted in it, not in wall time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_weights_go_only_to_peers_behind_and_at_most_once_per_reply_every_per_connection():
    """A request holding the current version gets no reply; 50 requests back to back on one connection get one reply
    and 49 are throttled; after REPLY_EVERY that connection is answered again, and a new connection is at once."""
    transport = TransportConfig(base_port=free_base_port(3) + 2)
    learner_net, actor_net = nets()
    expected = {
        n: (tuple(t.shape), np.dtype(np.float32 if t.is_floating_point() else np.int64).str)
        for n, t in actor_net.state_dict().items()
    }
    clock = FrozenClock()
    server = WeightServer(transport, clock=clock, run=333)
    server.publish(3, learner_net)
    server.start()
    ctx = zmq.Context.instance()
    peers: list[zmq.Socket] = []

    def peer() -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(weights_endpoints(transport)[1])
        peers.append(sock)
        return sock

    def handled(count: int) -> None:
        """Wait until the server has taken ``count`` WEIGHTS_REQUESTs in all (a hang guard, not a timing)."""
        deadline = time.monotonic() + 60
        while server.weight_replies + server.throttled + server.up_to_date < count:
            assert time.monotonic() < deadline, (server.weight_replies, server.throttled, server.up_to_date)
            time.sleep(0.01)

    def replies(sock: zmq.Socket) -> list[int]:
        """The versions of every reply ``sock`` got: the first awaited generously, then until 1 s of quiet."""
        versions, wait_ms = [], 30_000
        while sock.poll(wait_ms):
            versions.append(protocol.decode_weights(sock.recv_multipart(), expected)[1])
            wait_ms = 1000
        return versions

    try:
        a = peer()
        a.send_multipart(protocol.encode_weights_request(0, 1, 3))  # it holds v3: the current version
        handled(1)
        assert server.up_to_date == 1 and server.weight_replies == 0
        for _ in range(50):
            a.send_multipart(protocol.encode_weights_request(0, 1, -1))
        handled(51)
        assert (server.weight_replies, server.throttled, server.up_to_date) == (1, 49, 1)
        assert replies(a) == [3]  # one reply to 51 requests on this connection
        b = peer()  # another connection is not held back by a's replies
        b.send_multipart(protocol.encode_weights_request(1, 2, 8))  # v8 of another run: behind this one
        handled(52)
        assert replies(b) == [3]
        clock.now += REPLY_EVERY
        a.send_multipart(protocol.encode_weights_request(0, 1, 2))
        handled(53)
        assert replies(a) == [3] and (server.weight_replies, server.throttled, server.up_to_date) == (3, 49, 1)
    finally:
        for sock in peers:
            sock.close(linger=0)
        server.stop()
