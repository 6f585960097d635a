"""Every warppipe socket, made in one place: :func:`open_socket`, and what keeps a long-lived link alive.

A NAT, a firewall or Docker Swarm's routing mesh can drop a quiet link without telling either end, so every link
carries TCP keepalives (keeping middleboxes' state fresh) and, but for a held experience link, ZMTP heartbeats
(answered by ZeroMQ's I/O threads even while Python is busy, so a dead peer is noticed in seconds and the connecting
side reconnects). A held experience link waits its turn on purpose, unread, and keeps the kernel's keepalives only.
"""

from __future__ import annotations

import numpy as np
import zmq

from shared.config import TransportConfig
from shared.errors import ConfigError
from shared.spec import EnvSpec
from shared.wire import curve
from shared.wire.protocol import Limits, batch_dtypes

HELD_KERNEL_BUFFER = 1 << 17
"""Largest kernel send/receive buffer (bytes) of the experience sockets while the learner holds its replay ratio, so
full buffers under a slower learner do not hold batches past ``learner.max_weights_lag``."""


HELD_BATCHES_IN_FLIGHT = 12
"""An upper bound on one actor's batches between its first step and the learner's replay while the ratio is held: the
one being played, the one waiting to send, up to 2 queued at each end (CURVE), the two kernel buffers (Linux doubles
the size set: up to 2 batches each) and its share of the consolidated queue, with room to spare."""


def held_lag_allowance(actors: int, envs: int, steps: int, broadcast_env_steps: int) -> int:
    """Weights versions a batch may age in a held pipeline through no fault of its actor: the learner inserts at most
    every other actor's in-flight batches before it reaches that one, a version per ``broadcast_env_steps``."""
    in_flight = actors * HELD_BATCHES_IN_FLIGHT * envs * steps
    return -(-in_flight // max(1, broadcast_env_steps))


def held_kernel_buffer(spec: EnvSpec | Limits, envs: int, steps: int) -> int:
    """The kernel buffer of a held experience socket: about one batch of ``envs`` x ``steps`` steps of ``spec`` (or the
    receiver's limits), at most :data:`HELD_KERNEL_BUFFER`, so small-observation batches do not queue up stale either."""
    step_bytes = int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize + sum(
        d.itemsize for d in batch_dtypes(spec.obs_dtype, spec.num_actions)[1:]
    )
    return int(min(HELD_KERNEL_BUFFER, max(1 << 12, envs * steps * step_bytes)))


def open_socket(
    ctx: zmq.Context,
    kind: int,
    transport: TransportConfig | None,
    *,
    server: bool,
    send_hwm: int | None = None,
    recv_hwm: int | None = None,
    max_message: int | None = None,
    subscribe: bytes | None = None,
    kernel_buffer: int | None = None,
    heartbeats: bool = True,
) -> zmq.Socket:
    """A ``kind`` socket with LINGER 0, the given limits (None: the defaults, TCP buffers autotuned) and ``transport``'s link
    options and CURVE keys (server side when ``server``, the end that binds; ``transport`` None, a benchmark sender: neither).
    ``heartbeats`` False: TCP keepalives only (:func:`link_options`), for a link that waits on purpose."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        limits = {zmq.SNDHWM: send_hwm, zmq.RCVHWM: recv_hwm, zmq.MAXMSGSIZE: max_message}
        for option, value in (limits | {zmq.SNDBUF: kernel_buffer, zmq.RCVBUF: kernel_buffer}).items():
            if value is not None:
                sock.setsockopt(option, int(value))
        if subscribe is not None:
            sock.setsockopt(zmq.SUBSCRIBE, subscribe)
        if transport is not None:
            link_options(sock, transport, heartbeats)
            (curve.server_socket_options if server else curve.client_socket_options)(sock, transport)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


def bind(sock: zmq.Socket, address: str, transport: TransportConfig, what: str) -> None:
    """Bind ``sock`` to ``address``; a port another process holds raises ConfigError naming ``transport.base_port``."""
    try:
        sock.bind(address)
    except zmq.ZMQError as exc:
        if exc.errno != zmq.EADDRINUSE:
            raise
        raise ConfigError(
            f"transport.base_port={transport.base_port} puts {what} on {address}, which another process holds "
            "(another run on this machine?): give this run free ports with --transport.base-port"
        ) from exc


def link_options(sock: zmq.Socket, transport: TransportConfig, heartbeats: bool = True) -> None:
    """Set TCP keepalives and ZMTP heartbeats from ``transport`` (0 turns either layer off). ``heartbeats`` False: none on
    this socket. A held experience link takes none: while its receiver's queue is full ZeroMQ stops reading the
    connection, heartbeats included, so a link waiting its turn behind many actors would be dropped as dead; the
    kernel answers TCP keepalives whatever the application reads."""
    sock.setsockopt(zmq.TCP_KEEPALIVE, int(transport.tcp_keepalive_idle > 0))
    if transport.tcp_keepalive_idle > 0:
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, int(transport.tcp_keepalive_idle))
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, int(transport.tcp_keepalive_interval))
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, int(transport.tcp_keepalive_count))
    if heartbeats and transport.heartbeat_interval > 0:
        timeout_ms = round(transport.heartbeat_timeout * 1000)
        sock.setsockopt(zmq.HEARTBEAT_IVL, round(transport.heartbeat_interval * 1000))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)  # the peer drops us too after this much silence
