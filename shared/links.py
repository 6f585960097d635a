"""Options every warppipe socket carries so a long-lived link is never cut silently.

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

Call :func:`link_options` on a socket before ``bind``/``connect``.
"""

from __future__ import annotations

import zmq

from shared.config import TransportConfig


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
