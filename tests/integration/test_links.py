"""Long-lived links: every socket carries TCP keepalives and ZMTP heartbeats, and a frozen peer is dropped.

The second test freezes a real peer process (SIGSTOP: its ZeroMQ I/O threads stop answering, as a
host behind a dead link would) and checks that the learner-side socket drops it only when heartbeats
are on, and that the peer reconnects and delivers again by itself once it runs again.
"""

import os
import queue
import signal
import subprocess
import sys
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from actors.sender import BatchSender
from actors.weights_client import WeightClient
from launch.keys import KeysConfig, make_keys
from learner.consolidator import Consolidator
from learner.weight_server import WeightServer
from shared.config import ConfigError, TransportConfig
from shared.network import QNetwork
from shared.wire import curve, protocol
from shared.wire.links import held_kernel_buffer, link_options
from tests.support.launcher import fake_run_cmd
from tests.support.paths import ROOT
from tests.support.runs import free_base_port


def assert_link_options(sock: zmq.Socket, transport: TransportConfig) -> None:
    assert sock.getsockopt(zmq.TCP_KEEPALIVE) == 1
    assert sock.getsockopt(zmq.TCP_KEEPALIVE_IDLE) == transport.tcp_keepalive_idle
    assert sock.getsockopt(zmq.TCP_KEEPALIVE_INTVL) == transport.tcp_keepalive_interval
    assert sock.getsockopt(zmq.TCP_KEEPALIVE_CNT) == transport.tcp_keepalive_count
    assert sock.getsockopt(zmq.HEARTBEAT_IVL) == int(transport.heartbeat_interval * 1000)
    assert sock.getsockopt(zmq.HEARTBEAT_TIMEOUT) == int(transport.heartbeat_timeout * 1000)


def test_every_learner_and_actor_socket_carries_keepalives_and_heartbeats():
    transport = TransportConfig(
        base_port=free_base_port(4) + 2,
        tcp_keepalive_idle=45,
        tcp_keepalive_interval=7,
        tcp_keepalive_count=4,
        heartbeat_interval=2.5,
        heartbeat_timeout=12.0,
    )
    server = WeightServer(transport)
    consolidator = Consolidator(transport, 2, 1, protocol.Limits((84, 84), 7), queue.Queue())
    sender = BatchSender(f"tcp://127.0.0.1:{transport.base_port}", 0, 1, 4, 4, transport=transport)
    client = WeightClient(transport, 0, 1, QNetwork(4, 7, 84))
    try:
        sockets = [server._pub, server._router, *consolidator.sockets, sender._socket, client._sub, client._dealer]
        assert len(sockets) == 7
        for sock in sockets:
            assert_link_options(sock, transport)
    finally:
        client.close()
        sender.close({}, 0.0)
        for sock in consolidator.sockets:  # the thread was never started: its sockets are ours to close
            sock.close(0)
        server.stop()


def test_held_experience_sockets_keep_small_buffers_under_curve(tmp_path):
    """Held ratio under CURVE (every Compose and Swarm run): both ends queue at most 2 messages in about one batch of
    kernel buffer, so batches cannot wait behind a dozen others past the weights lag; a batch still crosses."""
    folder, allowed = tmp_path / "keys", tmp_path / "allowed"
    make_keys(KeysConfig(dir=str(folder), name=("learner", "actor"), authorize=str(allowed)))
    port = free_base_port(1)
    server = TransportConfig(
        base_port=port, curve_server_secret=str(folder / "learner.key_secret"), curve_authorized_dir=str(allowed)
    )
    client = TransportConfig(
        base_port=port, curve_client_secret=str(folder / "actor.key_secret"), curve_server_public=str(folder / "learner.key")
    )
    limits = protocol.Limits((36, 36), 7)
    buffer = held_kernel_buffer(limits, 2, 16)
    release = curve.start_authenticator(server)
    consolidator = Consolidator(server, 1, 2, limits, queue.Queue(), held=True, batch_steps=16)
    sender = BatchSender(f"tcp://127.0.0.1:{port}", 0, 1, 4, 4, transport=client, wait_when_full=True, kernel_buffer=buffer)
    try:
        (pull,), push = consolidator.sockets, sender._socket
        assert 4096 < buffer < 1 << 17  # one batch of 2 x 16 steps of 36 x 36 frames: neither bound
        assert (pull.getsockopt(zmq.RCVHWM), push.getsockopt(zmq.SNDHWM)) == (2, 2)
        assert (pull.getsockopt(zmq.RCVBUF), push.getsockopt(zmq.SNDBUF)) == (buffer, buffer)
        push.send(b"x" * buffer)  # more than one kernel buffer's worth, through CURVE
        assert pull.poll(30_000) and len(pull.recv()) == buffer
    finally:
        sender.close({}, 0.0)
        for sock in consolidator.sockets:
            sock.close(0)
        release()


@pytest.mark.parametrize(
    "field,value",
    [("tcp_keepalive_idle", -1), ("heartbeat_interval", 0.01), ("heartbeat_timeout", 5.0), ("tcp_keepalive_count", 0)],
)
def test_bad_link_settings_are_refused_by_name(field, value):
    cfg = TransportConfig(heartbeat_interval=10.0)
    setattr(cfg, field, value)
    with pytest.raises(ConfigError, match=f"transport.{field}={value!r}"):
        cfg.validate()


PEER = """
import sys, time, zmq
from shared.config import TransportConfig
from shared.wire.links import link_options
port, beat = int(sys.argv[1]), float(sys.argv[2])
sock = zmq.Context().socket(zmq.PUSH)
link_options(sock, TransportConfig(heartbeat_interval=beat, heartbeat_timeout=4 * beat if beat else 30.0))
sock.setsockopt(zmq.RECONNECT_IVL, 100)
sock.connect(f"tcp://127.0.0.1:{port}")
i = 0
while True:
    sock.send(str(i).encode())
    i += 1
    time.sleep(0.05)
"""


def frozen_peer_is_dropped(heartbeat: float, freeze: float) -> tuple[bool, int, int]:
    """Bind a PULL socket, freeze a real peer process for ``freeze`` s, then thaw it.
    Returns (dropped while frozen, last message before freezing, first message received after thawing)."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    link_cfg = TransportConfig(heartbeat_interval=heartbeat, heartbeat_timeout=4 * heartbeat if heartbeat else 30.0)
    link_options(pull, link_cfg)
    monitor = pull.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port), str(heartbeat)], cwd=ROOT)
    try:
        assert pull.poll(30_000), "the peer never sent"
        last = int(pull.recv())
        os.kill(peer.pid, signal.SIGSTOP)
        while pull.poll(200):  # drain what was in flight when it froze
            last = int(pull.recv())
        dropped = bool(monitor.poll(int(freeze * 1000)))
        if dropped:
            assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        os.kill(peer.pid, signal.SIGCONT)
        assert pull.poll(10_000), "the thawed peer never delivered again"
        after = int(pull.recv())
        return dropped, last, after
    finally:
        peer.kill()
        peer.wait(10)
        monitor.close(0)
        pull.close(0)
        ctx.term()


def test_a_frozen_peer_is_dropped_by_heartbeats_and_reconnects_by_itself():
    dropped, last, after = frozen_peer_is_dropped(heartbeat=0.25, freeze=4.0)
    assert dropped, "heartbeats on: the bound socket should drop a peer silent for 1 s within 4 s"
    assert after > last  # the peer reconnected on its own and its data flows again
    dropped, last, after = frozen_peer_is_dropped(heartbeat=0.0, freeze=2.0)
    assert not dropped  # without heartbeats nothing notices: the link the option exists for
    assert after == last + 1  # ... and the same connection simply resumes


def bind_within(ctx: zmq.Context, address: str, guard_s: float) -> bool:
    """Whether a socket can bind ``address`` before ``guard_s`` runs out (ZeroMQ unbinds a closed socket's port
    on its I/O thread, a moment after close() returns)."""
    deadline = time.monotonic() + guard_s
    while True:
        sock = ctx.socket(zmq.PULL)
        try:
            sock.bind(address)
            return True
        except zmq.ZMQError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        finally:
            sock.close(linger=0)


def test_a_port_another_process_holds_is_an_error_naming_transport_base_port(tmp_path):
    """A second run on the same ports: the learner's sockets refuse with an error that names the value and the
    port, let go of the ports they had bound, and ``launch.local`` exits 2 with that line, not a traceback."""
    ctx = zmq.Context.instance()
    base = free_base_port(4) + 2
    holder = ctx.socket(zmq.PULL)
    holder.bind(f"tcp://127.0.0.1:{base + 1}")  # actor slot 1's port, as another run's learner holds it
    try:
        transport = TransportConfig(base_port=base)
        with pytest.raises(
            ConfigError,
            match=rf"transport.base_port={base} puts actor slot 1's experience on "
            rf"tcp://127.0.0.1:{base + 1}, which another process holds",
        ):
            Consolidator(transport, 2, 1, protocol.Limits((84, 84), 7), queue.Queue())
        assert bind_within(ctx, f"tcp://127.0.0.1:{base}", 30.0)  # the failed consolidator let slot 0's port go
        proc = subprocess.run(
            fake_run_cmd(tmp_path, base, "--collect-only"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"error: transport.base_port={base} puts actor slot 1's experience" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        holder.close(linger=0)
    broadcasts = ctx.socket(zmq.PUB)
    broadcasts.bind(f"tcp://127.0.0.1:{base - 1}")  # the weights' broadcast port, held
    try:
        with pytest.raises(
            ConfigError,
            match=rf"transport.base_port={base} puts the weight broadcasts on "
            rf"tcp://127.0.0.1:{base - 1}",
        ):
            WeightServer(TransportConfig(base_port=base))
    finally:
        broadcasts.close(linger=0)
