"""An actor's outbound link: one PUSH socket with a bounded local staging queue.

Past ``max_staged`` staged batches the oldest is dropped; with ``wait_when_full`` (``learner.exact_ratio``) the sender
waits for the socket instead, so a learner catching up pauses env steps rather than wasting them.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq

from shared.config import TransportConfig
from shared.wire import protocol
from shared.wire.links import HELD_KERNEL_BUFFER, open_socket

DROP_LINE_EVERY_S = 10.0  # a stalled learner is said at most this often per actor, not once per dropped batch
WAIT_POLL_MS = 100  # a waiting sender checks should_stop and beats on_wait this often
TRACKER_GRACE_S = 5.0  # after the linger ran out, ZeroMQ's I/O thread drops what it still holds within this


@dataclass
class StagedBatch:
    seq: int
    weights_version: int
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # frames, actions, rewards, terminated, first
    episodes: np.ndarray | None = None  # float32 [K, 4]: return, score, success, start of episodes finished in the batch
    priorities: np.ndarray | None = None  # float32 [E, T]: initial replay priorities (prioritized replay, actor source)
    masks: np.ndarray | None = None  # uint8 [E, T, ceil(A/8)]: packed action masks (masked envs)
    run: int = 0  # the run of the weights that played the first step (0: none yet)


class BatchSender:
    def __init__(
        self,
        endpoint: str,
        actor_id: int,
        incarnation: int,
        max_staged: int,
        send_hwm: int,
        context: zmq.Context | None = None,
        transport: TransportConfig | None = None,
        wait_when_full: bool = False,
        should_stop: Callable[[], bool] = lambda: False,
        on_wait: Callable[[], None] = lambda: None,
        kernel_buffer: int = HELD_KERNEL_BUFFER,
    ):
        """``kernel_buffer``: the socket's kernel buffer while it waits (``wait_when_full``): about one batch."""
        self.actor_id, self.incarnation, self.max_staged, self.wait_when_full = actor_id, incarnation, max_staged, wait_when_full
        self._should_stop, self._on_wait = should_stop, on_wait
        self._context = context or zmq.Context.instance()
        # waiting: one message queued (two under CURVE, where 1 aborted libzmq) and a small kernel buffer, near the weights
        curve = transport is not None and bool(transport.curve_client_secret)
        hwm, buffer = (2 if curve else 1, kernel_buffer) if wait_when_full else (send_hwm, None)
        self._socket = open_socket(  # waiting: no ZMTP heartbeats, which a full receiver stops reading (links.py)
            self._context, zmq.PUSH, transport, server=False, send_hwm=hwm, kernel_buffer=buffer, heartbeats=not wait_when_full
        )
        self._socket.connect(endpoint)
        self._staged: collections.deque[StagedBatch] = collections.deque()
        self._in_flight: collections.deque[zmq.MessageTracker] = collections.deque()  # sent, ZeroMQ still holds them
        self.sent_batches = self.sent_transitions = self.dropped_batches = 0
        self._said_full_at = float("-inf")  # when the last "staging full" line was printed
        self.submit_seconds = 0.0  # time the collector spent handing batches over (the benchmark's "blocked" time)
        self.wait_seconds = 0.0  # of which waiting for the socket to take a batch (wait_when_full)

    def submit(self, batch: StagedBatch, stats: dict[str, float]) -> None:
        """Stage ``batch`` and send what the socket takes; then wait for the socket, or drop the oldest past the bound."""
        start = time.perf_counter()
        self._staged.append(batch)
        if self.wait_when_full:
            self._wait_for_room(stats, start)
        if len(self._staged) > self.max_staged:
            self._staged.popleft()
            self.dropped_batches += 1
            if start - self._said_full_at >= DROP_LINE_EVERY_S:
                self._said_full_at = start
                print(
                    f"[ACTOR {self.actor_id}] staging full ({self.max_staged} batches), the learner is not reading: "
                    f"dropped the oldest batch ({self.dropped_batches:,} dropped so far)",
                    flush=True,
                )
        self.flush(stats)
        self.submit_seconds += time.perf_counter() - start

    def _wait_for_room(self, stats: dict[str, float], start: float) -> None:
        """Flush until the socket took every staged batch or ``should_stop``: the high-water marks then bound the lag."""
        self.flush(stats)
        said = start
        while self._staged and not self._should_stop():
            if time.perf_counter() - said >= DROP_LINE_EVERY_S:  # a stall (learner down, actor refused): said every 10 s
                said = time.perf_counter()
                print(f"[ACTOR {self.actor_id}] the learner has not read for {said - start:.0f}s: waiting", flush=True)
            self._on_wait()
            if self._socket.poll(WAIT_POLL_MS, zmq.POLLOUT):
                self.flush(stats)
        self.wait_seconds += time.perf_counter() - start

    def flush(self, stats: dict[str, float]) -> None:
        """Send staged batches, oldest first, until the socket would block."""
        while self._staged:
            batch = self._staged[0]
            transitions = batch.arrays[1].size
            stats = dict(stats, dropped=self.dropped_batches, sent=self.sent_transitions + transitions)
            extra = {key: getattr(batch, key) for key in ("episodes", "priorities", "masks", "run")}
            parts = protocol.encode_batch(
                self.actor_id, self.incarnation, batch.seq, batch.weights_version, *batch.arrays, stats=stats, **extra
            )
            frames = [zmq.Frame(part, track=True, copy_threshold=self._socket.copy_threshold) for part in parts]
            try:
                self._socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            while self._in_flight and self._in_flight[0].done:
                self._in_flight.popleft()
            self._in_flight.append(zmq.MessageTracker(*frames))
            self._staged.popleft()
            self.sent_batches += 1
            self.sent_transitions += transitions

    def close(self, stats: dict[str, float], timeout: float) -> None:
        """Deliver what is staged for up to ``timeout`` s, close the socket, and wait until ZeroMQ holds none of the arrays."""
        deadline = time.monotonic() + timeout
        while self._staged and time.monotonic() < deadline:
            self.flush(stats)
            if self._staged:
                time.sleep(0.01)
        linger = max(0.0, deadline - time.monotonic()) + 0.1
        self._socket.close(linger=int(linger * 1000))
        release_by = time.monotonic() + linger + TRACKER_GRACE_S
        try:
            for tracker in self._in_flight:
                tracker.wait(max(0.0, release_by - time.monotonic()))
        except zmq.NotDone:
            held = sum(not tracker.done for tracker in self._in_flight)
            print(
                f"[ACTOR {self.actor_id}] ZeroMQ still held {held} sent batches {linger + TRACKER_GRACE_S:.1f}s after "
                f"closing; they may arrive damaged or not at all",
                flush=True,
            )
