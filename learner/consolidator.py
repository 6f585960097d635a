"""The consolidation thread: polls one PULL socket per actor slot, validates, queues whole batches.

Rejects (malformed, wrong slot or env count, replayed seq, stale incarnation or weights, a slot another actor holds)
are counted by reason; a seq gap counts lost batches and starts an episode, so replay never stitches frames across it.
A ledger per (slot, incarnation) accounts for what arrived against the actor's own ``sent`` and ``dropped`` counters.
While the queue is full the thread stops reading, so back-pressure reaches the actors, which drop and count.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import zmq

from learner.slots import SlotTable
from learner.thread_watch import SupervisedThread
from shared.config import TransportConfig
from shared.wire import protocol
from shared.wire.links import bind, held_kernel_buffer, open_socket

MAX_PER_SOCKET_PER_ROUND = 8  # fairness: drain at most this many messages from one actor before the next
HELD_PER_SOCKET_PER_ROUND = 1  # held, each batch waits for room in the queue: one per socket a round, from a moving slot
STALE_INCARNATIONS_KEPT = 16
LEDGER_INCARNATIONS_KEPT = 16  # ledgers kept per slot; the oldest incarnation's is forgotten first


@dataclass
class IncarnationLedger:
    """What this learner heard from one actor incarnation; ``sent`` and ``dropped`` are the actor's own counts."""

    slot: int
    incarnation: int
    first_seq: int = -1  # seq of the first message heard (> 0: it sent before this learner listened)
    next_seq: int = -1  # one past the newest seq heard
    accepted_batches: int = 0
    accepted_transitions: int = 0
    rejected_batches: int = 0  # new seqs rejected after decoding (stale_weights, stale_incarnation)
    rejected_transitions: int = 0
    duplicate_batches: int = 0  # replayed or older seqs: rejected, and not part of what the actor sent
    gap_batches: int = 0  # seqs never heard: the actor's staging drops plus batches lost in flight
    lost_transitions: int = 0  # handed to the socket by the actor (its ``sent``) but never heard
    sent_base: int = 0  # the actor's ``sent`` before first_seq
    sent: int = 0  # the actor's ``sent`` in the newest message heard
    dropped_base: int = 0  # the actor's ``dropped`` before first_seq
    dropped: int = 0  # the actor's ``dropped`` in the newest message heard

    @property
    def lost_in_flight_batches(self) -> int:
        """Seq gaps the actor's staging drops do not explain."""
        return self.gap_batches - (self.dropped - self.dropped_base)

    @property
    def unaccounted_transitions(self) -> int:
        """Sent (since first_seq) minus accepted, rejected and lost: 0 unless the actor's counts lie."""
        return self.sent - self.sent_base - self.accepted_transitions - self.rejected_transitions - self.lost_transitions


@dataclass
class SlotTrack:
    """What the consolidator knows of one actor slot."""

    incarnation: int = -1
    next_seq: int = 0
    accepted_batches: int = 0
    accepted_transitions: int = 0
    lost_batches: int = 0
    refused_batches: int = 0  # valid messages from an incarnation that does not hold the slot (slot_owned)
    stats: dict = field(default_factory=dict)
    weights_version: int = 0
    run: int = 0  # the run of the weights its latest accepted batch was played with
    old_incarnations: collections.deque = field(default_factory=lambda: collections.deque(maxlen=STALE_INCARNATIONS_KEPT))


class Consolidator(SupervisedThread):
    def __init__(
        self,
        transport: TransportConfig,
        num_actors: int,
        envs_per_actor: int,
        limits: protocol.Limits,
        out: queue.Queue,
        context: zmq.Context | None = None,
        held: bool = False,
        batch_steps: int = 64,
    ):
        """``held``: the learner holds its replay ratio: one queued message and a one-batch kernel buffer per socket."""
        super().__init__(name="consolidator", daemon=True)
        self.limits, self.envs_per_actor, self.out = limits, envs_per_actor, out
        self._stop_event = threading.Event()
        self._context = context or zmq.Context.instance()
        self.sockets: list[zmq.Socket] = []
        self.per_round = HELD_PER_SOCKET_PER_ROUND if held else MAX_PER_SOCKET_PER_ROUND
        self._rotate = held  # not held, slot 0 is read first in every round
        # held: small buffers keep batches near the weights; under CURVE a high-water mark of 2 (1 aborted libzmq)
        hwm = (2 if transport.curve_server_secret else 1) if held else transport.recv_hwm
        buffer = held_kernel_buffer(limits, envs_per_actor, batch_steps) if held else None
        bound = limits.max_message_bytes  # ZeroMQ's is per frame; the decoder rejects (and counts) larger messages
        try:
            for slot in range(num_actors):
                sock = open_socket(
                    self._context,
                    zmq.PULL,
                    transport,
                    server=True,
                    recv_hwm=hwm,
                    max_message=bound,
                    kernel_buffer=buffer,
                    heartbeats=not held,  # held, a link waits its turn on purpose (shared/wire/links.py link_options)
                )
                self.sockets.append(sock)
                bind(sock, f"tcp://{transport.host}:{transport.base_port + slot}", transport, f"actor slot {slot}'s experience")
        except BaseException:
            for sock in self.sockets:
                sock.close(linger=0)
            raise
        self.tracks = [SlotTrack() for _ in range(num_actors)]
        self.slots = SlotTable(num_actors, transport.slot_lease, envs_per_actor)
        self._curve = bool(transport.curve_server_secret)  # messages then carry the sender's key (ZAP User-Id)
        self.rejects: collections.Counter[str] = collections.Counter()
        self.version_said: set[int] = set()  # slots named for speaking another protocol version
        self.received = self.accepted_batches = self.accepted_transitions = self.lost_batches = 0
        self.weights_version = 0  # the learner's current published version (an int: set atomically by the learner)
        self.run_id = 0  # the learner's run identity (shared/wire/protocol.py), set by the learner
        self.max_weights_lag = 0  # 0: no limit
        self.ledgers: list[collections.OrderedDict[int, IncarnationLedger]] = [
            collections.OrderedDict() for _ in range(num_actors)
        ]
        self._ledger_lock = threading.Lock()

    def ledger(self) -> list[IncarnationLedger]:
        """A copy of every kept ledger, by slot then oldest incarnation first."""
        with self._ledger_lock:
            return [dataclasses.replace(entry) for slot in self.ledgers for entry in slot.values()]

    def serve(self) -> None:
        poller = zmq.Poller()
        for sock in self.sockets:
            poller.register(sock, zmq.POLLIN)
        first = 0  # held, the slot each round starts from moves on by one: no actor is always served first
        try:
            while not self._stop_event.is_set():
                ready = dict(poller.poll(timeout=100))
                for i in range(len(self.sockets)):
                    slot = (first + i) % len(self.sockets)
                    if self.sockets[slot] in ready:
                        self._drain(slot, self.sockets[slot])
                if self._rotate:
                    first = (first + 1) % len(self.sockets)
        finally:
            for sock in self.sockets:
                sock.close(linger=0)

    def stop(self) -> None:
        self._stop_event.set()

    def _drain(self, slot: int, sock: zmq.Socket) -> None:
        for _ in range(self.per_round):
            try:
                parts = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.received += 1
            batch = self._validate(slot, parts)
            if batch is not None:
                self._enqueue(batch)

    def _validate(self, slot: int, parts: list) -> protocol.Batch | None:
        try:
            batch = protocol.decode_batch(parts, self.limits)
        except protocol.ProtocolError as exc:
            self.rejects[exc.reason] += 1
            if exc.reason == "version" and slot not in self.version_said:  # once per slot: an actor of another release
                self.version_said.add(slot)
                print(f"[MAIN] actor slot {slot} speaks another protocol ({exc}): its batches are refused", flush=True)
            return None
        if batch.actor != slot:
            self.rejects["wrong_slot"] += 1
            return None
        if batch.frames.shape[0] != self.envs_per_actor:
            self.rejects["envs"] += 1
            return None
        key = parts[0].get("User-Id") if self._curve else ""
        with self._ledger_lock:
            return self._sequence(slot, batch, key)

    def _sequence(self, slot: int, batch: protocol.Batch, key: str = "") -> protocol.Batch | None:
        track = self.tracks[slot]
        ledgers = self.ledgers[slot]
        ledger = ledgers.get(batch.incarnation)
        stale = batch.incarnation != track.incarnation and batch.incarnation in track.old_incarnations
        if not stale and not self.slots.admit(slot, batch.incarnation, key):
            self.rejects["slot_owned"] += 1
            track.refused_batches += 1
            return None
        if batch.incarnation != track.incarnation:
            if stale:
                self.rejects["stale_incarnation"] += 1
                if ledger is not None:
                    if batch.seq < ledger.next_seq:
                        ledger.duplicate_batches += 1
                    else:
                        _note_new_seq(ledger, batch)
                        ledger.rejected_batches += 1
                        ledger.rejected_transitions += batch.num_transitions
                return None
            ledger = ledgers[batch.incarnation] = IncarnationLedger(slot, batch.incarnation)
            while len(ledgers) > LEDGER_INCARNATIONS_KEPT:
                ledgers.popitem(last=False)
            if track.incarnation >= 0:
                track.old_incarnations.append(track.incarnation)
            track.incarnation, track.next_seq = batch.incarnation, 0
            batch.first = _mark_episode_start(batch.first)
        # the track's current incarnation has a ledger: made when it started (the newest entry, not the one dropped)
        ledger = cast(IncarnationLedger, ledger)
        if batch.seq < max(track.next_seq, ledger.next_seq):
            self.rejects["replayed_seq"] += 1
            ledger.duplicate_batches += 1
            return None
        _note_new_seq(ledger, batch)
        same_run = batch.run == self.run_id  # another run's version numbers say nothing about this run's lag
        if same_run and self.max_weights_lag and self.weights_version - batch.weights_version > self.max_weights_lag:
            # its seq stays unused in the track: the next accepted batch sees the gap and starts an episode
            self.rejects["stale_weights"] += 1
            ledger.rejected_batches += 1
            ledger.rejected_transitions += batch.num_transitions
            return None
        if batch.seq > track.next_seq:
            lost = batch.seq - track.next_seq
            track.lost_batches += lost
            self.lost_batches += lost
            batch.first = _mark_episode_start(batch.first)
        track.next_seq = batch.seq + 1
        counters: list[Any] = [ledger, track, self]  # each counts what it accepted
        for counts in counters:
            counts.accepted_batches += 1
            counts.accepted_transitions += batch.num_transitions
        track.stats = batch.stats
        track.weights_version, track.run = batch.weights_version, batch.run
        return batch

    def _enqueue(self, batch: protocol.Batch) -> None:
        while not self._stop_event.is_set():
            with contextlib.suppress(queue.Full):
                self.out.put(batch, timeout=0.1)
                return


def _note_new_seq(ledger: IncarnationLedger, batch: protocol.Batch) -> None:
    """Account a message with a seq above every seq heard from its incarnation (accepted or not)."""
    n = batch.num_transitions
    sent, dropped = int(batch.stats["sent"]), int(batch.stats["dropped"])
    if ledger.next_seq < 0:  # the first message heard: earlier seqs predate this learner's listening
        ledger.first_seq = batch.seq
        ledger.sent_base = ledger.sent = sent - n
        ledger.dropped_base = dropped
    else:
        ledger.gap_batches += batch.seq - ledger.next_seq
        ledger.lost_transitions += max(0, sent - n - ledger.sent)
    ledger.next_seq = batch.seq + 1
    ledger.sent = max(ledger.sent, sent)
    ledger.dropped = max(ledger.dropped, dropped)


def _mark_episode_start(first: np.ndarray) -> np.ndarray:
    if first[:, 0].all():
        return first
    first = first.copy()
    first[:, 0] = 1
    return first
