"""Actor slots and who holds them: leases, so N identical replicas each get their own slot.

The learner has ``num_slots`` experience sockets (``base_port + slot``). A slot is *held* by one
actor incarnation (and, with CURVE, by the public key it connected with) and stays held while
that holder is heard from: every accepted message renews it, and it lapses ``lease`` seconds
after the holder's last message. A slot granted on request but not yet sent on is only *claimed*:
the claim lapses ``grace`` seconds after the grant (asking again does not extend it), and the first
valid message of any incarnation takes a claimed slot, so requests alone cannot pre-empt an actor that sends.
One connection holds at most one claim (a new claim from it drops its earlier one), so a flood of requests under
fresh incarnations over one socket keeps at most one free slot from replicas that ask; and at most ``max_claims``
slots are claimed at once across all connections (half the slots, at least 4), so many connections cannot hold
every free slot either. Two ways to get a slot:

- **Ask for one** (``grant``; a SLOT_REQUEST on the learner's ROUTER, shared/wire/protocol.py): an
  actor without a fixed slot (``python -m launch.actor`` replicas under Compose or Swarm) is
  given the lowest free or lapsed slot; with every slot held it is refused with the reason, and
  asks again later (a spare). Asking again with the same incarnation returns the same slot.
- **Just send** (``admit``, called by the consolidator for every decoded message): an actor with
  a fixed slot (spawned by ``launch.local``, or ``--actor-id``) takes its slot with its first
  message if the slot is free or lapsed.

A message from anyone but the holder of a live slot is refused (the consolidator counts it as
``slot_owned``), so a duplicate replica, or any process on a loopback learner, cannot starve a
live actor. ``release`` frees a slot at once: the local launcher calls it when it restarts a
slot's dead process. Thread-safe: the consolidator thread admits, the weights thread grants.
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
        """``grace``: seconds a granted slot stays claimed without a message (0: the smaller of ``lease`` and
        ``CLAIM_GRACE``)."""
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
                for slot, h in enumerate(self._holders):
                    if h is not None and not h.sent and h.peer == peer:
                        self._holders[slot] = None
            claimed = sum(1 for s, h in enumerate(self._holders) if h is not None and not h.sent and not self._free(s, now))
            if claimed >= self.max_claims:
                self.refused_requests += 1
                return -1, f"{claimed} slot(s) are claimed by actors that have not sent yet; ask again in a moment"
            candidates = [want] if want >= 0 else range(self.num_slots)
            for slot in candidates:
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
