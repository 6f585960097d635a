"""Every warppipe socket, made in one place: :func:`open_socket`, and what keeps a long-lived link alive.

:func:`open_socket` sets what every socket carries (LINGER 0: closing never blocks on unsent messages), the
high-water marks and maximum message size its role asks for, the link options below, and CURVE (server side
on bound sockets, client side on connecting ones) when the run has keys (shared/wire/curve.py).

A NAT, a firewall or Docker Swarm's routing mesh (IPVS, which forgets a TCP connection idle for
900 s) can drop a quiet link without telling either end: an actor whose learner is busy, or a
weights channel between broadcasts, would then wait forever. Two layers keep links alive and
detect dead ones:

- **TCP keepalives** (``transport.tcp_keepalive_idle`` seconds of silence, then a probe every
  ``transport.tcp_keepalive_interval`` s, ``transport.tcp_keepalive_count`` unanswered probes
  drop the connection): the kernel's own traffic, enough to keep middleboxes' state fresh.
- **ZMTP heartbeats** (``transport.heartbeat_interval`` seconds; a peer silent for
  ``transport.heartbeat_timeout`` s is disconnected): ZeroMQ's PING/PONG, answered by its I/O
  threads (a learner busy in Python still answers), so a dead peer is noticed in seconds and the
  connecting side reconnects by itself (ZeroMQ's ``RECONNECT_IVL``), while a bound socket frees
  what it held for that peer.

:func:`open_socket` applies :func:`link_options` before the caller binds (:func:`bind`) or connects.
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
"""Largest kernel send/receive buffer (bytes) of the experience sockets while the learner holds its replay ratio
(``learner.exact_ratio``): under a slower learner every buffer between an actor and replay stays full, and
loopback TCP's autotuned buffers (megabytes: a dozen 64-step Mario batches per direction) held batches 13
weight broadcasts behind the learner, past ``learner.max_weights_lag``. 128 KiB holds less than one Mario batch."""


def held_kernel_buffer(spec: EnvSpec | Limits, envs: int, steps: int) -> int:
    """The kernel buffer of a held experience socket: about one batch of ``envs`` x ``steps`` steps of ``spec``
    (an env spec, or the receiver's limits, which carry the same observation and action fields),
    at most :data:`HELD_KERNEL_BUFFER`. A fixed 128 KiB holds dozens of small-observation batches (a corridor
    batch is 2.5 KB): their actors' batches then arrived up to 16 broadcasts late and up to half were dropped as
    stale_weights, so how much of a run's data was trained on depended on the machine's timing."""
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
) -> zmq.Socket:
    """A ``kind`` socket (zmq.PUSH, PULL, PUB, SUB, DEALER, ROUTER) with LINGER 0, the given high-water marks
    (messages queued per peer) and maximum message size in bytes (a larger frame disconnects the sender), the
    link options of ``transport`` and its CURVE keys, server side when ``server`` (the end that binds).
    ``transport`` None (a local benchmark sender): no link options, no CURVE. ``subscribe``: a SUB's prefix.
    ``kernel_buffer``: the TCP send and receive buffer in bytes (None: the kernel's autotuning)."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        if send_hwm is not None:
            sock.setsockopt(zmq.SNDHWM, int(send_hwm))
        if recv_hwm is not None:
            sock.setsockopt(zmq.RCVHWM, int(recv_hwm))
        if max_message is not None:
            sock.setsockopt(zmq.MAXMSGSIZE, int(max_message))
        if kernel_buffer is not None:
            sock.setsockopt(zmq.SNDBUF, int(kernel_buffer))
            sock.setsockopt(zmq.RCVBUF, int(kernel_buffer))
        if subscribe is not None:
            sock.setsockopt(zmq.SUBSCRIBE, subscribe)
        if transport is not None:
            link_options(sock, transport)
            (curve.server_socket_options if server else curve.client_socket_options)(sock, transport)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


def bind(sock: zmq.Socket, address: str, transport: TransportConfig, what: str) -> None:
    """Bind ``sock`` to ``address``, one of the ports ``transport.base_port`` sets. A port another process holds
    (most often another run on this machine, whose learner binds the same base_port - 2 ... base_port + actors - 1)
    raises ConfigError naming ``transport.base_port``, the address and ``what`` it was for."""
    try:
        sock.bind(address)
    except zmq.ZMQError as exc:
        if exc.errno != zmq.EADDRINUSE:
            raise
        raise ConfigError(
            f"transport.base_port={transport.base_port} puts {what} on {address}, which another "
            f"process holds (another run on this machine?): give this run free ports with "
            f"--transport.base-port"
        ) from exc


def link_options(sock: zmq.Socket, transport: TransportConfig) -> None:
    """Set TCP keepalives and ZMTP heartbeats from ``transport`` (0 turns either layer off)."""
    if transport.tcp_keepalive_idle > 0:
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, int(transport.tcp_keepalive_idle))
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, int(transport.tcp_keepalive_interval))
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, int(transport.tcp_keepalive_count))
    else:
        sock.setsockopt(zmq.TCP_KEEPALIVE, 0)
    if transport.heartbeat_interval > 0:
        interval_ms = int(round(transport.heartbeat_interval * 1000))
        timeout_ms = int(round(transport.heartbeat_timeout * 1000))
        sock.setsockopt(zmq.HEARTBEAT_IVL, interval_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)  # the peer drops us too after this much silence
