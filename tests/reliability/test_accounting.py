"""Accounting per actor incarnation: what the learner accepted, rejected and lost adds up to what the actor
says it sent, and every seq gap is reported.

Two real actor processes with one-message staging and high-water marks and a learner that drains slowly,
so actors drop batches in staging (seq gaps); a window in which the learner's weights are far ahead, so
real batches are rejected as ``stale_weights`` (attributed to their incarnation); and replayed
``(actor, incarnation, seq)`` messages injected on the actors' sockets (duplicates). The learner's ledger
is compared with each actor's own report.
"""

import queue
import time

import torch
import zmq

from actors.collector import actor_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.console import format_processor_line
from learner.data_plane import DataPlane
from shared.envs import env_spec
from tests.support.messages import valid_batch

REPLAYS_PER_SLOT = 5


def test_accepted_rejected_and_lost_add_up_to_what_each_incarnation_sent(make_config):
    cfg = make_config(actors=2, envs=1, steps=16, capacity=8192)
    cfg.actor.max_staged_batches = 1
    cfg.actor.send_hwm = 1
    cfg.transport.recv_hwm = 1
    cfg.transport.consolidated_queue = 1
    cfg.learner.max_weights_lag = 2
    cfg.learner.exact_ratio = False  # actors drop on a full staging (holding the ratio, they would wait)
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    ctx = zmq.Context.instance()
    injectors = []
    for slot in range(cfg.actors):
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(f"tcp://127.0.0.1:{cfg.transport.base_port + slot}")
        injectors.append(sock)
    mp = spawn_context()
    stop, reports = mp.Event(), mp.Queue()
    procs = [start_process(mp, actor_main, (cfg, slot, stop, reports, 0), f"actor-{slot}") for slot in range(cfg.actors)]
    try:
        phase, results = drive_phases(cfg, plane, injectors, stop, reports)
        read_what_they_flushed(plane, results, cfg.actors)
        codes = stop_processes(procs, stop, timeout=20)
        # what the consolidation thread accepted and queued reaches replay
        plane.wait_for(sum(e.accepted_transitions for e in plane.ledger()), timeout=30)
    finally:
        stop.set()
        for sock in injectors:
            sock.close()
        plane.close()
        stop_processes(procs, stop, timeout=5)
    assert phase == 3 and len(results) == 2, f"stuck in phase {phase}"
    assert codes == [0, 0]
    check_accounting(cfg, plane, sorted(results, key=lambda r: r["actor"]))


def current_ledgers(plane, actors):
    """Each slot's ledger entry of its current incarnation (None before it is heard from)."""
    by_slot = {}
    for entry in plane.ledger():
        if entry.incarnation == plane.consolidator.tracks[entry.slot].incarnation:
            by_slot[entry.slot] = entry
    return [by_slot.get(slot) for slot in range(actors)]


def own_ledger(plane, report):
    return next((e for e in plane.ledger() if (e.slot, e.incarnation) == (report["actor"], report["incarnation"])), None)


def drive_phases(cfg, plane, injectors, stop, reports):
    """Drain slowly until the actors drop in staging, make their batches stale and replay old seqs (phase 1), accept
    again (phase 2), then stop them and collect their reports (phase 3). Returns the phase reached and the reports."""
    phase, accepted_at_phase_2 = 0, None
    results = []
    deadline = time.monotonic() + 120
    while len(results) < cfg.actors and time.monotonic() < deadline:
        ledgers = current_ledgers(plane, cfg.actors)
        if phase < 3:
            plane.drain(max_batches=1)
            time.sleep(0.05)  # a slow learner: the actors' one-batch staging overflows
        else:
            plane.drain(timeout=0.02)
        if any(e is None for e in ledgers):
            continue
        if phase == 0 and all(e.dropped > 0 and e.accepted_batches >= 2 for e in ledgers):
            phase = 1  # the learner jumps far ahead: the actors' version-0 batches are now stale
            plane.set_weights_version(10)
            for slot, entry in enumerate(ledgers):
                for k in range(REPLAYS_PER_SLOT):
                    injectors[slot].send_multipart(valid_batch(cfg, slot, entry.incarnation, k % 2))
        elif phase == 1 and all(e.rejected_batches >= 2 and e.duplicate_batches == REPLAYS_PER_SLOT for e in ledgers):
            phase = 2
            plane.set_weights_version(0)
            accepted_at_phase_2 = [e.accepted_batches for e in ledgers]
        elif phase == 2 and all(e.accepted_batches >= a + 2 for e, a in zip(ledgers, accepted_at_phase_2)):
            phase = 3  # stop the actors; drain fast so what they flush on the way out lands
            stop.set()
        if phase == 3:
            try:
                results.append(reports.get_nowait())
            except queue.Empty:
                pass
    return phase, results


def read_what_they_flushed(plane, results, actors):
    """An actor reports once its socket is closed; ZeroMQ still holds its last batches and delivers them only while
    the learner reads (within the actor's linger). So read until every batch each actor says it sent has been
    accepted or rejected (an event; the deadline only guards against a hang)."""
    deadline = time.monotonic() + 60
    while (
        len(results) == actors
        and time.monotonic() < deadline
        and not all(
            (e := own_ledger(plane, r)) is not None and e.accepted_batches + e.rejected_batches >= r["sent_batches"]
            for r in results
        )
    ):
        plane.drain(timeout=0.02)


def check_accounting(cfg, plane, results):
    """Each incarnation's ledger against its own report (``results``, by actor), and the reject reasons and console
    figures against the ledgers."""
    ledgers = {(e.slot, e.incarnation): e for e in plane.ledger()}
    stats = plane.stats()
    rejects = dict(plane.consolidator.rejects)
    print()
    for r in results:
        e = ledgers[(r["actor"], r["incarnation"])]
        print(
            f"actor {r['actor']}: report sent {r['sent_transitions']} transitions in {r['sent_batches']} batches, "
            f"{r['batches']} seqs, dropped {r['dropped_batches']}; ledger accepted {e.accepted_transitions}/"
            f"{e.accepted_batches}, rejected {e.rejected_transitions}/{e.rejected_batches}, "
            f"gaps {e.gap_batches}, lost in flight {e.lost_transitions}, duplicates {e.duplicate_batches}"
        )
    print(format_processor_line(stats, 0.0), rejects)
    for r, per_actor in zip(results, stats.per_actor):
        e = ledgers[(r["actor"], r["incarnation"])]
        assert e.first_seq == 0 and e.next_seq == r["batches"]  # heard from its first to its last seq
        assert e.sent == r["sent_transitions"] and e.dropped == r["dropped_batches"]
        assert e.accepted_transitions + e.rejected_transitions + e.lost_transitions == r["sent_transitions"]
        assert e.lost_transitions == 0 and e.unaccounted_transitions == 0 and e.lost_in_flight_batches == 0
        assert e.accepted_batches + e.rejected_batches == r["sent_batches"]
        assert e.accepted_batches + e.rejected_batches + e.gap_batches == r["batches"]  # every seq accounted for
        assert e.gap_batches == r["dropped_batches"] > 0  # the staging drops, each one a reported gap
        assert e.rejected_batches >= 2 and e.duplicate_batches == REPLAYS_PER_SLOT
        assert e.accepted_transitions == per_actor  # what replay holds from this actor
    assert rejects == {
        "stale_weights": sum(e.rejected_batches for e in ledgers.values()),
        "replayed_seq": REPLAYS_PER_SLOT * cfg.actors,
    }
    # the console's Drops: every seq number that left a hole in replay (staging drops and stale rejects)
    assert stats.drops == sum(e.gap_batches + e.rejected_batches for e in ledgers.values())
    assert stats.processed == sum(r["sent_transitions"] for r in results) - sum(e.rejected_transitions for e in ledgers.values())
