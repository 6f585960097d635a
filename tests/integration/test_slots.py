"""Actor slots: identical replicas lease distinct slots, a slot belongs to one actor, intruders are counted.

The table's rules run on a fake clock; then real actor processes (fake env) ask a real learner
data plane and weight server for slots over real sockets: two replicas with the same config get
slots 0 and 1, a third is refused with the reason and exits, a valid message with a fresh
incarnation sent to a live actor's slot is rejected and counted while that actor's data keeps
landing, and a replica started after one is SIGKILLed takes the dead one's slot once its lease lapses.
"""

import queue
import time

import pytest
import torch
import zmq

from actors.collector import actor_main
from launch.actor import parse_learner
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.slots import SlotTable
from learner.weight_server import WeightServer
from shared.config import ConfigError
from shared.config_migration import read_config
from shared.envs import env_spec
from shared.wire import protocol
from tests.support.messages import valid_batch


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_slot_table_grants_distinct_slots_refuses_extras_and_frees_lapsed_or_released_slots():
    clock = Clock()
    table = SlotTable(2, lease=30, envs_per_actor=1, clock=clock)
    assert table.grant(11) == (0, "")
    assert table.grant(11) == (0, "")  # asking again: the same slot, not a second one
    assert table.grant(22) == (1, "")
    slot, why = table.grant(33)
    assert slot == -1 and "all 2 slot(s) are held" in why
    assert table.grant(33, want=5)[1].startswith("slot 5 does not exist")
    assert "steps 2 env(s)" in table.grant(33, envs=2)[1]
    assert table.refused_requests == 3
    assert table.admit(0, 11) and not table.admit(0, 33)  # the holder lands; an intruder does not
    clock.now = 29.0
    assert table.admit(1, 22)  # slot 1 renewed at 29 s
    clock.now = 31.0  # slot 0's holder last heard at 0 s: lapsed
    assert table.held() == [False, True]
    assert table.grant(33) == (0, "") and table.takeovers == 1
    assert table.admit(0, 33)  # the new holder's first message
    assert not table.admit(0, 11)  # the old holder is now the intruder
    table.release(1)  # the launcher restarts slot 1's process
    assert table.admit(1, 44) and table.holder(1).incarnation == 44


def test_a_claim_without_data_lapses_after_its_grace_and_yields_to_data():
    clock = Clock()
    table = SlotTable(2, lease=30, clock=clock)
    assert table.grace == 10.0  # the smaller of the lease and CLAIM_GRACE
    assert table.grant(11) == (0, "") and table.grant(22) == (1, "")
    clock.now = 9.0
    assert table.grant(11) == (0, "")  # asked again: the same slot; the claim is not extended
    clock.now = 10.5
    assert table.held() == [False, False]  # neither sent within the grace: both claims lapsed
    assert table.grant(33, want=1) == (1, "")  # a flood's claim on the slot an actor is about to send on
    assert table.admit(1, 44) and table.holder(1).incarnation == 44 and table.holder(1).sent  # data beats a claim
    assert not table.admit(1, 33)  # the claimant is now an intruder
    clock.now = 35.0
    assert table.held() == [False, True]  # the sender holds it for the lease
    assert table.claims == 3


def test_a_claimant_that_keeps_asking_holds_neither_a_fixed_slot_nor_a_free_one():
    """Requests alone, asked again every second under the same incarnations, keep no slot: an actor with the fixed
    slot 2 lands its first message over the claim on it, and the claim on slot 1 lapses 10 s after it was granted
    (asking again does not extend it), so a replica asking then gets slot 1. Only the table's public calls."""
    clock = Clock()
    table = SlotTable(3, lease=30, clock=clock)
    assert table.admit(0, 11)  # a real actor on slot 0
    assert table.grant(66, want=2) == (2, "") and table.grant(77) == (1, "")  # claims on the other two
    landed = []
    for second in range(1, 11):
        clock.now = float(second)
        assert table.grant(77) == (1, "")  # the claimant asks again: the same slot
        table.grant(66, want=2)
        if second >= 2:  # the fixed-slot actor sends from the 2nd second on
            landed.append(table.admit(2, 44))
        assert table.admit(0, 11)
    assert landed == [True] * 9 and table.holder(2).incarnation == 44
    clock.now = 10.5  # the claim granted at 0 s, asked again ten times, lapses after the 10 s grace
    assert table.grant(88) == (1, "")  # a replica asking now gets it
    assert [table.holder(slot).incarnation for slot in range(3)] == [11, 88, 44]


def test_one_connection_holds_at_most_one_claim():
    """A flood of requests under fresh incarnations over one connection keeps at most one free slot from replicas
    that ask on their own connections: each new claim drops that connection's earlier one."""
    clock = Clock()
    table = SlotTable(4, lease=30, clock=clock)
    assert table.admit(0, 11)
    for inc in range(1_000, 1_100):
        slot, _ = table.grant(inc, want=-1 if inc % 2 else 3, peer=b"flood")
        assert slot in (1, 3)

    def flood_claims():
        return [slot for slot in range(4) if table.holder(slot) is not None and table.holder(slot).peer == b"flood"]

    assert flood_claims() == [1] and table.holder(1).incarnation == 1_099  # its last claim, nothing else
    assert table.grant(21, peer=b"replica-a") == (2, "") and table.grant(22, peer=b"replica-b") == (3, "")
    assert table.grant(21, peer=b"replica-a") == (2, "")  # asking again on its own connection: kept
    assert table.grant(1_200, peer=b"flood") == (1, "") and flood_claims() == [1]  # still one
    assert table.admit(2, 21) and table.admit(3, 22)  # the replicas' first batches land


def test_slot_is_bound_to_the_curve_key_that_holds_it():
    table = SlotTable(1, lease=30, clock=Clock())
    assert table.admit(0, 7, key="keyA")
    assert not table.admit(0, 7, key="keyB")  # same incarnation number, another key: refused
    assert table.grant(7, key="keyB")[0] == -1
    assert table.grant(7, key="keyA") == (0, "")


def test_slot_messages_round_trip_and_bad_ones_are_refused():
    request = protocol.decode_request(protocol.encode_slot_request(5, -1, 2))
    assert (request["kind"], request["inc"], request["want"], request["E"]) == ("slot_request", 5, -1, 2)
    assert protocol.decode_request(protocol.encode_weights_request(1, 5, 3))["kind"] == "weights_request"
    reply = protocol.decode_slot(protocol.encode_slot(5, 3, 8, 30.0, ""))
    assert (reply["slot"], reply["slots"], reply["lease"], reply["reason"]) == (3, 8, 30.0, "")
    assert len(protocol.decode_slot(protocol.encode_slot(5, -1, 8, 30.0, "x" * 1000))["reason"]) == 240
    with pytest.raises(protocol.ProtocolError, match="slot=8"):
        protocol.decode_slot(protocol.encode_slot(5, 8, 8, 30.0))  # slot beyond the slot count
    with pytest.raises(protocol.ProtocolError) as bad:
        protocol.decode_slot(protocol.encode_weights_request(1, 5, 3))
    assert bad.value.reason == "kind"


def test_learner_address_is_host_and_port():
    assert parse_learner("learner:5600") == ("learner", 5600)
    assert parse_learner("[::1]:7000") == ("::1", 7000)
    for bad in ("learner", ":5600", "learner:http"):
        with pytest.raises(ConfigError, match=repr(bad)):
            parse_learner(bad)


def test_identical_replicas_lease_slots_intruders_are_refused_and_a_dead_replicas_slot_is_reused(make_config):
    cfg = make_config(actors=2, envs=1, steps=16, capacity=8192, frame_size=36)
    cfg.transport.slot_lease = 4.0
    cfg.actor.slot_wait = 3.0
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    server = WeightServer(cfg.transport, slots=plane.consolidator.slots)
    server.start()
    mp = spawn_context()
    stop, reports = mp.Event(), mp.Queue()
    tracks = plane.consolidator.tracks
    intruder = zmq.Context.instance().socket(zmq.PUSH)
    intruder.setsockopt(zmq.LINGER, 1000)
    procs = [start_process(mp, actor_main, (cfg, -1, stop, reports), f"replica-{i}") for i in range(3)]
    got: list[dict] = []

    def wait_until(cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not cond():
            plane.drain(timeout=0.02)
            try:
                got.append(reports.get_nowait())
            except queue.Empty:
                pass
        assert cond(), f"{what} within {timeout}s; reports {got}"

    try:
        wait_until(
            lambda: min(t.accepted_batches for t in tracks) >= 3 and len(got) == 1,
            60,
            "two replicas landing on slots 0 and 1 and the third refused",
        )
        refused = got[0]
        assert refused["actor"] == -1 and "all 2 slot(s) are held by live actors" in refused["refused"]
        wait_until(lambda: any(p.exitcode is not None for p in procs), 60, "the refused replica exiting")
        spare = next(p for p in procs if p.exitcode is not None)
        assert spare.exitcode == 0 and sum(p.is_alive() for p in procs) == 2
        assert tracks[0].incarnation != tracks[1].incarnation and refused["incarnation"] not in (
            tracks[0].incarnation,
            tracks[1].incarnation,
        )

        # an intruder: valid messages with a fresh incarnation on slot 0's socket while its actor is live
        holder, accepted = tracks[0].incarnation, tracks[0].accepted_batches
        intruder.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
        for seq in range(5):
            intruder.send_multipart(valid_batch(cfg, 0, 12345, seq))
        wait_until(
            lambda: plane.consolidator.rejects["slot_owned"] == 5 and tracks[0].accepted_batches >= accepted + 5,
            30,
            "the intruder's 5 messages refused while slot 0's actor keeps landing",
        )
        assert tracks[0].incarnation == holder and tracks[0].refused_batches == 5 and tracks[1].refused_batches == 0
        assert not [e for e in plane.ledger() if e.incarnation == 12345]  # never sequenced
        print(
            f"\nintruder: 5 valid messages with a fresh incarnation on slot 0 refused ({dict(plane.consolidator.rejects)}); "
            f"slot 0 accepted {accepted} -> {tracks[0].accepted_batches} batches from its holder {holder:#x}"
        )

        # a replica dies; a new one gets its slot once the lease lapses, and the other slot is untouched
        victim = next(p for p in procs if p is not spare)
        victim.kill()
        victim.join(timeout=10)
        killed_at = time.monotonic()
        before = [t.incarnation for t in tracks]
        patient = read_config(cfg.to_json())
        patient.actor.slot_wait = 0.0  # the replacement waits as a spare until the dead one's lease lapses
        procs.append(start_process(mp, actor_main, (patient, -1, stop, reports), "replica-3"))
        wait_until(
            lambda: sum(t.incarnation != b for t, b in zip(tracks, before)) == 1,
            60,
            "the new replica landing on the dead one's slot",
        )
        moved = next(s for s, (t, b) in enumerate(zip(tracks, before)) if t.incarnation != b)
        print(
            f"replica on slot {moved} SIGKILLed; its replacement landed there {time.monotonic() - killed_at:.1f}s later "
            f"(lease {cfg.transport.slot_lease:g}s)"
        )
        assert time.monotonic() - killed_at >= cfg.transport.slot_lease - 1.0  # not before the lease lapsed
        assert plane.consolidator.slots.takeovers == 1
        stop.set()
        wait_until(lambda: len(got) == 3, 30, "the two live replicas' reports")
    finally:
        stop.set()
        codes = stop_processes(procs, stop, timeout=20)
        intruder.close()
        server.stop()
        plane.close()
    live = sorted(r["actor"] for r in got[1:])
    assert live == [0, 1] and all(r["batches"] > 0 for r in got[1:])
    assert codes[0:3].count(-9) == 1 and codes.count(0) == 3


def test_a_flood_of_slot_requests_holds_no_slot_from_actors_that_send(make_config):
    """Slot requests under 3,000 fresh incarnations, beside a real actor on slot 0: that actor keeps landing, an
    actor started during the flood with its fixed slot 2 lands too (data beats the flood's claims), and once
    the flood stops its claims lapse after the grace."""
    cfg = make_config(actors=3, envs=1, steps=16, capacity=8192, frame_size=36)
    cfg.transport.slot_lease = 4.0  # the claims' grace: the smaller of the lease and 10 s
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    server = WeightServer(cfg.transport, slots=plane.consolidator.slots)
    server.start()
    mp = spawn_context()
    stop, reports = mp.Event(), mp.Queue()
    tracks, table = plane.consolidator.tracks, plane.consolidator.slots
    flood = zmq.Context.instance().socket(zmq.DEALER)
    flood.setsockopt(zmq.LINGER, 0)
    flood.connect(protocol.weights_endpoints(cfg.transport)[1])
    procs = [start_process(mp, actor_main, (cfg, 0, stop, reports), "actor-0")]

    def wait_until(cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not cond():
            plane.drain(timeout=0.02)
        assert cond(), f"{what} within {timeout}s"

    try:
        wait_until(lambda: tracks[0].accepted_batches >= 3, 60, "the actor on slot 0 landing")
        before = tracks[0].accepted_batches
        for i in range(3_000):
            flood.send_multipart(protocol.encode_slot_request(1_000_000 + i, 2 if i % 2 else -1, 1))
            if i == 100:  # an actor with a fixed slot starts while the flood claims its slot
                procs.append(start_process(mp, actor_main, (cfg, 2, stop, reports), "actor-2"))
            while flood.poll(0):
                flood.recv_multipart()
        wait_until(lambda: server.slot_requests >= 3_000, 60, "the server answering every request")
        wait_until(
            lambda: tracks[2].accepted_batches >= 3 and tracks[0].accepted_batches >= before + 3,
            60,
            "both actors landing after the flood",
        )
        assert table.holder(0).sent and table.holder(2).sent
        assert table.holder(2).incarnation == tracks[2].incarnation  # the actor, not a flood incarnation
        assert table.claims >= 1 and plane.consolidator.rejects["slot_owned"] == 0
        wait_until(lambda: table.held() == [True, False, True], 30, "the flood's claim on slot 1 lapsing")
        print(
            f"\nflood: {server.slot_requests} requests, {table.claims} claims granted, {table.refused_requests} "
            f"refused; slot 0 accepted {before} -> {tracks[0].accepted_batches}, slot 2 {tracks[2].accepted_batches}"
        )
    finally:
        stop.set()
        stop_processes(procs, stop, timeout=20)
        flood.close()
        server.stop()
        plane.close()


def test_outstanding_claims_are_capped_across_all_connections():
    """Many connections each holding one claim cannot hold every free slot: at most half the slots (at least 4) are
    claimed and not yet sent on at once; a claim that turns into data makes room for another."""
    table = SlotTable(16, lease=30, clock=Clock())
    assert table.max_claims == 8
    granted = [table.grant(100 + i, peer=b"conn-%d" % i)[0] for i in range(8)]
    assert granted == list(range(8))
    slot, why = table.grant(200, peer=b"conn-x")
    assert slot == -1 and why == "8 slot(s) are claimed by actors that have not sent yet; ask again in a moment"
    assert table.admit(0, 100)  # the first claimant's data lands: one claim fewer
    assert table.grant(200, peer=b"conn-x") == (8, "")


def test_a_slot_whose_lease_lapsed_leaves_the_lag_figures_and_calls_for_no_rebroadcast():
    """A dead actor is not behind, it is gone: once its slot's lease lapses its last batch neither shows as a growing
    lag nor, when it was played with another run's weights, keeps the learner rebroadcasting."""
    from types import SimpleNamespace

    from learner.slot_view import SlotView

    clock = Clock()
    table = SlotTable(2, lease=30, clock=clock)
    assert table.admit(0, 11) and table.admit(1, 22)
    tracks = [SimpleNamespace(stats={"epsilon": 0.1}, run=7, weights_version=3, incarnation=11)]
    tracks.append(SimpleNamespace(stats={"epsilon": 0.1}, run=6, weights_version=9, incarnation=22))  # another run's
    view = SlotView(SimpleNamespace(tracks=tracks, slots=table), SimpleNamespace(weights_version=10, run=7))
    assert view.weights_lag() == [7, -1] and view.any_on_other_run()
    clock.now = 20.0
    assert table.admit(0, 11)  # slot 0's actor lives on; slot 1's went silent at 0 s
    clock.now = 31.0
    assert view.weights_lag() == [7, -1] and not view.any_on_other_run()
    clock.now = 51.0  # and now slot 0's too
    assert view.weights_lag() == [-1, -1]


def test_a_replica_whose_claim_was_overtaken_asks_again(make_config):
    """A replica granted slot 0 waits for the learner's weights before its first batch; meanwhile another sender's
    data takes the claimed slot (data beats a claim). Within half a lease the replica finds its slot gone, says so,
    leases slot 1 and its batches land there instead of being refused on slot 0 for ever."""
    cfg = make_config(actors=2, envs=1, steps=16, capacity=8192, frame_size=36)
    cfg.transport.slot_lease = 2.0  # the replica asks whether slot 0 is still its own every second
    cfg.actor.weights_timeout = 3.0  # no weights are published: it waits this long before playing
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    server = WeightServer(cfg.transport, slots=plane.consolidator.slots)
    server.start()
    table, tracks = plane.consolidator.slots, plane.consolidator.tracks
    mp = spawn_context()
    stop, reports = mp.Event(), mp.Queue()
    other = zmq.Context.instance().socket(zmq.PUSH)
    other.setsockopt(zmq.LINGER, 1000)
    proc = start_process(mp, actor_main, (cfg, -1, stop, reports), "replica")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and table.holder(0) is None:
            time.sleep(0.02)
        claim = table.holder(0)
        assert claim is not None and not claim.sent  # granted, nothing sent yet
        other.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
        seq = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and tracks[1].accepted_batches < 3:
            other.send_multipart(valid_batch(cfg, 0, 777, seq))  # keeps slot 0 live under its own incarnation
            seq += 1
            plane.drain(timeout=0.1)
        assert tracks[1].accepted_batches >= 3, dict(plane.consolidator.rejects)
        assert table.holder(0).incarnation == 777 and table.holder(1).incarnation == claim.incarnation
        stop.set()
        report = reports.get(timeout=60)
        assert report["actor"] == 1 and report["incarnation"] == claim.incarnation and not report["overtaken"]
    finally:
        stop.set()
        stop_processes([proc], stop, timeout=20)
        other.close()
        server.stop()
        plane.close()
