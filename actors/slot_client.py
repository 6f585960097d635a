"""Ask the learner for an actor slot (SLOT_REQUEST, shared/wire/protocol.py), for actors without a fixed one.

Replicas (``docker compose up --scale actor=N``) each lease the lowest free slot at start (learner/slots.py), so none
needs its own configuration; while every slot is held the actor asks every second (a spare), at most ``wait`` s if > 0.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import zmq

from shared.config import TransportConfig
from shared.wire import protocol
from shared.wire.links import open_socket
from shared.wire.protocol import weights_endpoints

NOTICE_EVERY = 60.0  # seconds between repeated "still refused" / "no learner yet" lines


def lease_slot(
    transport: TransportConfig,
    incarnation: int,
    envs: int,
    want: int = -1,
    wait: float = 0.0,
    should_stop: Callable[[], bool] = lambda: False,
    echo: Callable[[str], None] = print,
    context: zmq.Context | None = None,
) -> dict | None:
    """The learner's grant (``slot`` >= 0), its refusal (``slot`` -1, ``reason``) after ``wait`` s (at once, with
    ``version_skew``, from a learner of another protocol version), or None if stopped."""
    _, router_addr = weights_endpoints(transport)
    # a SLOT reply is a few hundred bytes; weights replies are not for us
    sock = open_socket(context or zmq.Context.instance(), zmq.DEALER, transport, server=False, recv_hwm=4, max_message=1 << 16)
    sock.connect(router_addr)
    started = time.monotonic()
    noticed, refusal = -NOTICE_EVERY, None
    try:
        while not should_stop():
            with contextlib.suppress(zmq.Again):  # no link yet: ask again in a second
                sock.send_multipart(protocol.encode_slot_request(incarnation, want, envs), flags=zmq.NOBLOCK)
            reply = _await_reply(sock, incarnation, timeout=1.0)
            now = time.monotonic()
            if reply is not None and (reply["slot"] >= 0 or reply.get("version_skew")):
                return reply
            refusal = reply or refusal
            if now - noticed >= NOTICE_EVERY:
                noticed = now
                if reply is None:
                    echo(f"[ACTOR] no answer from the learner at {router_addr} yet; asking every second")
                else:
                    echo(f"[ACTOR] the learner refused a slot: {reply['reason']}")
            if wait > 0 and now - started >= wait:
                return refusal or dict(slot=-1, reason=f"no answer from the learner at {router_addr} in {wait:g} s")
        return None
    finally:
        sock.close(linger=0)


def _await_reply(sock: zmq.Socket, incarnation: int, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not sock.poll(timeout=max(1, int(left * 1000))):
            return None
        parts = sock.recv_multipart(copy=False)
        try:
            reply = protocol.decode_slot(parts)
        except protocol.ProtocolError:
            if (theirs := protocol.decode_version_refusal(parts)) is not None:  # a learner of another release
                skew = f"the learner speaks protocol version {theirs}, this actor {protocol.VERSION}"
                return dict(slot=-1, reason=skew, version_skew=skew)
            continue  # not a SLOT reply (or garbled): ignore it
        if reply["inc"] == incarnation:
            return reply
    return None
