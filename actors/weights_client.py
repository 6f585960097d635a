"""An actor's weight client (Acme's "variable client"): ask once at start, then take broadcasts."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
import zmq

from shared.config import TransportConfig
from shared.wire import protocol
from shared.wire.links import open_socket
from shared.wire.protocol import weights_endpoints


class WeightClient:
    def __init__(
        self,
        transport: TransportConfig,
        actor_id: int,
        incarnation: int,
        net: torch.nn.Module,
        context: zmq.Context | None = None,
    ):
        ctx = context or zmq.Context.instance()
        pub_addr, router_addr = weights_endpoints(transport)
        self.actor_id, self.incarnation = actor_id, incarnation
        self.expected = {
            name: (tuple(t.shape), np.dtype(np.float32 if t.is_floating_point() else np.int64).str)
            for name, t in net.state_dict().items()
        }
        max_bytes = sum(int(np.prod(shape)) * 8 for shape, _ in self.expected.values()) + (1 << 16)
        self._sub = open_socket(ctx, zmq.SUB, transport, server=False, recv_hwm=2, max_message=max_bytes, subscribe=b"")
        self._sub.connect(pub_addr)
        self._dealer = open_socket(ctx, zmq.DEALER, transport, server=False, recv_hwm=2, max_message=max_bytes)
        self._dealer.connect(router_addr)
        self.rejected = 0
        self.version_rejects = 0  # weights messages of another protocol version (a learner of another release)
        self.version_skew = ""  # what the last of them said: both versions
        self.run = 0  # the run whose weights the actor holds (0: none yet)
        self.env_steps = 0  # the run's env steps when those weights were sent (the exploration schedule's clock)

    def fetch(self, have: int, timeout: float, should_stop=lambda: False) -> tuple[int, dict] | None:
        """Ask until the current weights come, so the actor has them before its first action; None after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not should_stop():
            request = protocol.encode_weights_request(self.actor_id, self.incarnation, have)
            with contextlib.suppress(zmq.Again):  # never block (no usable link: DEALER sends block); ask again in a second
                self._dealer.send_multipart(request, flags=zmq.NOBLOCK)
            ask_until = min(deadline, time.monotonic() + 1.0)
            while time.monotonic() < ask_until:
                if not self._dealer.poll(timeout=50):
                    continue
                got = self._decode(self._dealer.recv_multipart(copy=False))
                if got is not None:
                    self.run, self.env_steps = got[0], got[3]
                    return got[1], got[2]
        return None

    def poll(self, have: int) -> tuple[int, dict] | None:
        """The newest broadcast (version, arrays) to take over version ``have`` of ``self.run`` (or another run's), or None."""
        newest = None
        while True:
            try:
                parts = self._sub.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            got = self._decode(parts)
            if got is None:
                continue
            run, version = got[0], got[1]
            if newest is not None and run == newest[0]:
                newer = version > newest[1]
            else:  # a message of a later run than the best so far (broadcasts arrive in order) or the first one
                newer = run != self.run or version > have
            if newer:
                newest = got
        if newest is None:
            return None
        self.run, self.env_steps = newest[0], newest[3]
        return newest[1], newest[2]

    def _decode(self, parts: list) -> tuple[int, int, dict, int] | None:
        """(run, version, arrays, env_steps), or None for a malformed message (counted in ``rejected``)."""
        try:
            return protocol.decode_weights(parts, self.expected)
        except protocol.ProtocolError as exc:
            self.rejected += 1
            if exc.reason == "version":
                self.version_rejects += 1
                self.version_skew = str(exc)
            return None

    def close(self) -> None:
        self._sub.close(linger=0)
        self._dealer.close(linger=0)
