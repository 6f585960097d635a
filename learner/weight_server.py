"""The learner's weight channel: PUB for broadcasts, ROUTER for "give me the current weights" (and a slot).

``publish`` encodes the weights once; the server thread broadcasts them and answers a request with them, so an actor
has the current weights before its first action. The ROUTER also answers SLOT_REQUESTs (learner/slots.py).

A WEIGHTS_REQUEST is answered only when it is behind (its ``have`` is not the current version) and at most once per
connection every :data:`REPLY_EVERY` seconds: a flood of requests costs one reply a second, not a copy of the weights
each (the rest are counted, ``up_to_date`` and ``throttled``). An actor asks once a second until the weights come.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
import zmq

from learner.slots import SlotTable
from learner.thread_watch import SupervisedThread
from shared.config import TransportConfig
from shared.wire import curve, protocol
from shared.wire.links import bind, open_socket
from shared.wire.protocol import weights_endpoints  # noqa: F401  (re-exported: the learner's side of the endpoints)

REPLY_EVERY = 1.0  # seconds: at most one weights reply per connection this often (WeightClient.fetch asks each second)
REQUESTS_QUEUED = 64  # requests (4 KiB at most each) ZeroMQ queues per connection: 256 KiB, not its default 1000
REPLIED_KEPT = 1024  # connections remembered before those replied to more than REPLY_EVERY ago are forgotten


def state_arrays(net: torch.nn.Module) -> dict[str, np.ndarray]:
    """CPU copies of a network's state (float32 parameters and buffers, int64 counters)."""
    state = {name: tensor.detach().to("cpu") for name, tensor in net.state_dict().items()}
    return {name: (t.float() if t.is_floating_point() else t.long()).numpy().copy() for name, t in state.items()}


class WeightServer(SupervisedThread):
    def __init__(
        self,
        transport: TransportConfig,
        context: zmq.Context | None = None,
        slots: SlotTable | None = None,
        run: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``run``: the run identity every broadcast carries (shared/wire/protocol.py; 0: a fresh one); ``clock``: the
        seconds :data:`REPLY_EVERY` is counted in."""
        super().__init__(name="weight-server", daemon=True)
        self.slots = slots
        self.run_id = run or protocol.new_run_id()
        self._curve = bool(transport.curve_server_secret)
        ctx = context or zmq.Context.instance()
        pub_addr, router_addr = weights_endpoints(transport)
        self._release_auth = curve.start_authenticator(transport, ctx)  # the allow-list runs before any socket binds
        self._pub: zmq.Socket | None = None
        self._router: zmq.Socket | None = None
        try:
            self._pub = open_socket(ctx, zmq.PUB, transport, server=True, send_hwm=2)
            # at most 2 replies (a few MB each) queued per peer: a peer that asks but never reads gets the rest dropped
            self._router = open_socket(
                ctx, zmq.ROUTER, transport, server=True, send_hwm=2, recv_hwm=REQUESTS_QUEUED, max_message=4096
            )
            bind(self._pub, pub_addr, transport, "the weight broadcasts")
            bind(self._router, router_addr, transport, "the weight requests")
        except BaseException:
            self._close_sockets()
            raise
        self._lock = threading.Lock()
        self._frames: list | None = None
        self._arrays: dict[str, np.ndarray] = {}
        self._unsent = False
        self._stop_event = threading.Event()
        self.version = -1
        self.bad_requests = self.slot_requests = 0
        self.weight_replies = 0  # WEIGHTS_REQUESTs answered with the weights
        self.up_to_date = 0  # WEIGHTS_REQUESTs not answered: they hold the current version already
        self.throttled = 0  # WEIGHTS_REQUESTs not answered: their connection had the weights within REPLY_EVERY
        self._clock = clock
        self._replied: dict[bytes, float] = {}  # connection (routing id) -> when it was last sent the weights
        self._forget_at = REPLIED_KEPT  # size of _replied at which the old entries go (doubles while all are recent)
        self.refused_versions: set[int] = set()  # protocol versions of requests answered VERSION_REFUSED (said once each)
        self.echo: Callable[[str], None] = lambda line: print(line, flush=True)

    def publish(self, version: int, net: torch.nn.Module, env_steps: int = 0) -> None:
        """Broadcast ``net``'s weights as ``version``, with the run's ``env_steps`` so far (the actors' exploration)."""
        arrays = state_arrays(net)
        frames = protocol.encode_weights(version, arrays, self.run_id, env_steps)
        with self._lock:
            self._frames, self.version, self._unsent, self._arrays = frames, version, True, arrays

    def rebroadcast(self) -> None:
        """Send the current weights again (for actors still on another run's, which may have missed the first)."""
        with self._lock:
            self._unsent = self._frames is not None

    def current(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """The last published (version, arrays), or None before the first publish; the arrays are never written."""
        with self._lock:
            return None if self._frames is None else (self.version, self._arrays)

    def serve(self) -> None:
        assert self._pub is not None and self._router is not None  # both bound in __init__, which raises otherwise
        try:
            while not self._stop_event.is_set():
                with self._lock:
                    frames, version, unsent, self._unsent = self._frames, self.version, self._unsent, False
                if unsent:  # set only once _frames holds a publish
                    self._pub.send_multipart(cast(list, frames), copy=False)
                if self._router.poll(timeout=20):
                    self._answer(frames, version)
        finally:
            self._close_sockets()

    def _answer(self, frames: list | None, version: int) -> None:
        """Answer every request queued now; WEIGHTS_REQUESTs with ``frames`` (``version``'s) when :meth:`_due`."""
        assert self._router is not None  # bound in __init__
        while True:
            try:
                identity, *parts = self._router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                request = protocol.decode_request(parts)
            except protocol.ProtocolError:
                self.bad_requests += 1
                if (theirs := protocol.request_version(parts)) is not None:  # another release: say so to both sides
                    self._router.send_multipart([identity, *protocol.encode_version_refusal(theirs)])
                    if theirs not in self.refused_versions:
                        self.refused_versions.add(theirs)
                        self.echo(
                            f"[MAIN] an actor of protocol version {theirs} asked for weights or a slot; this learner speaks "
                            f"{protocol.VERSION}: refused, naming both versions"
                        )
                continue
            if request["kind"] == protocol.KIND_SLOT_REQUEST:
                key = cast(str, parts[0].get("User-Id")) if self._curve else ""  # the client's key, from the ZAP handler
                self._router.send_multipart([identity, *self._slot_reply(identity, request, key)])
                self.slot_requests += 1
            elif frames is not None and self._due(identity.bytes, request["have"], version):  # None: nothing published yet
                self._router.send_multipart([identity, *frames], copy=False)

    def _due(self, peer: bytes, have: int, version: int) -> bool:
        """Whether connection ``peer``, holding ``have``, gets the weights of ``version`` now (else counted, unanswered).
        A request names no run: ``have`` equal to ``version`` counts as current (an actor on another run's weights of
        that number takes the broadcasts, repeated while it sends: learner/loop.py REBROADCAST_EVERY)."""
        if have == version:
            self.up_to_date += 1
            return False
        now = self._clock()
        if now - self._replied.get(peer, -math.inf) < REPLY_EVERY:
            self.throttled += 1
            return False
        if len(self._replied) >= self._forget_at:  # amortized: a table of recent peers grows, each entry forgotten once
            self._replied = {p: t for p, t in self._replied.items() if now - t < REPLY_EVERY}
            self._forget_at = max(REPLIED_KEPT, 2 * len(self._replied))
        self._replied[peer] = now
        self.weight_replies += 1
        return True

    def _slot_reply(self, identity, request: dict, key: str) -> list:
        if self.slots is None:  # a weights-only server (benchmark, tests): no slots to give
            slot, slots, lease, reason = -1, 1, 1.0, "this learner hands out no slots; give the actor --actor-id"
        else:
            slot, reason = self.slots.grant(request["inc"], request["want"], key, request["E"], peer=identity.bytes)
            slots, lease = self.slots.num_slots, self.slots.lease
        return protocol.encode_slot(request["inc"], slot, slots, lease, reason)

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:
            self.join(timeout=5.0)
        else:
            self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._pub, self._router):
            if sock is not None:
                sock.close(linger=0)
        self._release_auth()
