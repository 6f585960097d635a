"""Actor slots and who holds them: leases, so N identical replicas each get their own slot.

A slot is *held* by one actor incarnation (with CURVE, its key too) while it is heard from within ``lease`` seconds; a
slot granted on request (``grant``) is only *claimed* until its first message, for ``grace`` s, and the first valid data
(``admit``) takes a free, lapsed or claimed slot. Anyone else's message on a held slot is refused (``slot_owned``);
claims are capped per connection and in all. Thread-safe: the consolidator thread admits, the weights thread grants.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

CLAIM_GRACE = 10.0  # seconds a slot granted on request stays claimed before its first message (at most the lease)


@dataclass
class Holder:
    """The actor holding a slot: its incarnation, its CURVE key ('' without CURVE), when it was last heard."""

    incarnation: int
    key: str
    last_heard: float
    sent: bool = False  # a message of its own landed: held for the lease; else only claimed (``grace``)
    peer: bytes = b""  # the connection a claim was asked on (the weight server's routing id); b"": unknown


class SlotTable:
    def __init__(
        self,
        num_slots: int,
        lease: float,
        envs_per_actor: int = 0,
        clock: Callable[[], float] = time.monotonic,
        grace: float = 0.0,
    ):
        """``grace``: seconds a granted slot stays claimed without a message (0: the smaller of ``lease``, CLAIM_GRACE)."""
        self.num_slots = num_slots
        self.envs_per_actor = envs_per_actor  # > 0: a request for another env count is refused
        self.lease = float(lease)
        self.grace = float(grace) if grace > 0 else min(self.lease, CLAIM_GRACE)
        self._clock = clock
        self._lock = threading.Lock()
        self._holders: list[Holder | None] = [None] * num_slots
        self.refused_requests = 0  # SLOT_REQUESTs answered with -1
        self.claims = 0  # slots granted on request (claimed until their first message)
        self.takeovers = 0  # a lapsed or released slot taken by a new holder
        self.max_claims = max(4, num_slots // 2)  # slots claimed and not yet sent on, across all connections

    def holder(self, slot: int) -> Holder | None:
        with self._lock:
            h = self._holders[slot]
            return None if h is None else Holder(h.incarnation, h.key, h.last_heard, h.sent, h.peer)

    def _free(self, slot: int, now: float) -> bool:
        h = self._holders[slot]
        return h is None or now - h.last_heard > (self.lease if h.sent else self.grace)

    def _take(self, slot: int, incarnation: int, key: str, now: float, sent: bool, peer: bytes = b"") -> None:
        if self._holders[slot] is not None:
            self.takeovers += 1
        self._holders[slot] = Holder(incarnation, key, now, sent, peer)

    def admit(self, slot: int, incarnation: int, key: str = "") -> bool:
        """Whether a message from ``incarnation`` (sent with CURVE ``key``) may land in ``slot``; renews its lease."""
        now = self._clock()
        with self._lock:
            h = self._holders[slot]
            if h is not None and h.incarnation == incarnation and h.key == key:
                h.last_heard, h.sent = now, True
                return True
            if h is not None and h.sent and not self._free(slot, now):
                return False
            self._take(slot, incarnation, key, now, sent=True)  # free, lapsed, or only claimed: data beats a claim
            return True

    def grant(self, incarnation: int, want: int = -1, key: str = "", envs: int = 0, peer: bytes = b"") -> tuple[int, str]:
        """(slot, '') for a SLOT_REQUEST asked on connection ``peer``, or (-1, why) when refused."""
        now = self._clock()
        if self.envs_per_actor and envs and envs != self.envs_per_actor:
            with self._lock:
                self.refused_requests += 1
            return -1, (
                f"the actor steps {envs} env(s) per message but this learner takes --actor.envs-per-actor {self.envs_per_actor}"
            )
        with self._lock:
            for slot, h in enumerate(self._holders):  # asked again: the slot it already holds
                if h is not None and h.incarnation == incarnation and h.key == key and not self._free(slot, now):
                    if want in (-1, slot):
                        if h.sent:  # a claim is not extended by asking again
                            h.last_heard = now
                        return slot, ""
            if want >= self.num_slots:
                self.refused_requests += 1
                return -1, f"slot {want} does not exist: this learner has {self.num_slots} slot(s) (--actors)"
            if peer:  # one claim per connection: its earlier claim (another incarnation's) is dropped
                self._holders = [None if h is not None and not h.sent and h.peer == peer else h for h in self._holders]
            claimed = sum(1 for s, h in enumerate(self._holders) if h is not None and not h.sent and not self._free(s, now))
            if claimed >= self.max_claims:
                self.refused_requests += 1
                return -1, f"{claimed} slot(s) are claimed by actors that have not sent yet; ask again in a moment"
            for slot in [want] if want >= 0 else range(self.num_slots):
                if self._free(slot, now):
                    self._take(slot, incarnation, key, now, sent=False, peer=peer)
                    self.claims += 1
                    return slot, ""
            self.refused_requests += 1
            if want >= 0:
                return -1, f"slot {want} is held by a live actor (heard within the {self.lease:g} s lease)"
            return -1, (
                f"all {self.num_slots} slot(s) are held by live actors; start the learner with more --actors "
                f"or run fewer actor replicas (this one waits as a spare)"
            )

    def release(self, slot: int) -> None:
        """Free ``slot`` now (its process is known to be dead)."""
        with self._lock:
            self._holders[slot] = None

    def held(self) -> list[bool]:
        """Per slot: whether a live (not lapsed) holder has it."""
        now = self._clock()
        with self._lock:
            return [not self._free(slot, now) for slot in range(self.num_slots)]
