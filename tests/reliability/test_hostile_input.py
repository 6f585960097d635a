"""Hostile input at the learner's experience sockets while real actors feed it.

Over 10,000 malformed messages, from real PUSH sockets to a real DataPlane's ports, interleaved
with two real actor processes (fake env): the consolidation thread stays up, every reject is
counted under its reason exactly as often as that kind was sent, every transition the actors sent
lands, and the process hosting the learner's data plane grows by less than 50 MB. A frame above
``transport.max_message_bytes`` gets its sender disconnected (ZeroMQ's MAXMSGSIZE; seen by a socket
monitor on the sender) while the other peers of the same socket stay connected.
"""

import collections
import gc
import queue
import time

import msgpack
import numpy as np
import psutil
import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from actors.collector import actor_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from shared.envs import env_spec
from shared.wire import protocol
from tests.support.messages import valid_batch

PER_KIND = 640  # messages of each hostile kind (17 kinds: 10,880 in all)
WARM_UP = 1000  # hostile messages sent before the memory baseline
MAX_GROWTH = 50 << 20  # bytes of RSS the learner's process may grow by


def hostile_kinds(cfg, rng):
    """{kind: (reason the learner must count, make(i) -> frames)}; ``replayed`` is filled in once actors run."""
    good = valid_batch(cfg)
    header = msgpack.unpackb(good[0])
    arrays = good[1:]

    def with_header(**changes):
        return [msgpack.packb(dict(header, **changes)), *arrays]

    def junk(n):
        return rng.bytes(int(n))

    bad_actions = np.full((cfg.actor.envs_per_actor, cfg.actor.batch_steps), 200, np.uint8).tobytes()
    third = cfg.transport.max_message_bytes // 3 + 1
    big = b"\0" * third
    return {
        "random_frames": (
            "frame_count",
            lambda i: [junk(rng.integers(0, 64)) for _ in range([1, 2, 3, 4, 5, 6, 7, 8, 10][i % 9])],
        ),
        "random_header": ("header_msgpack", lambda i: [b"\xc1" + junk(rng.integers(0, 200)), *arrays]),
        "truncated_msgpack": ("header_msgpack", lambda i: [good[0][: 1 + i % (len(good[0]) - 1)], *arrays]),
        "wrong_frame_count": ("frame_count", lambda i: good[: 1 + i % 5] if i % 6 else good + [b"extra"]),
        "array_of_2**32": ("header_msgpack", lambda i: [(b"\xdd", b"\xdf")[i % 2] + b"\xff\xff\xff\xff" + junk(8), *arrays]),
        "E=2**32": ("field", lambda i: with_header(E=1 << 32)),
        "size_mismatch": ("size", lambda i: with_header(T=cfg.actor.batch_steps - 1 - i % 7)),
        "shape_mismatch": ("shape", lambda i: with_header(shape=[cfg.env.frame_size + 1 + i % 7, cfg.env.frame_size])),
        "bad_dtype": ("dtype", lambda i: with_header(dtypes=["<f4", "|u1", "<f8", "|u1", "|u1"])),
        "wrong_version": ("version", lambda i: with_header(v=protocol.VERSION + 1 + i)),
        "non_utf8": (
            "header_msgpack",
            lambda i: [msgpack.packb({"v": 1, "kind": b"\xff\xfe" + junk(4)}, use_bin_type=False), *arrays],
        ),
        "non_string_keys": ("header_msgpack", lambda i: [msgpack.packb({i: 1, "v": 1}), *arrays]),
        "deep_nesting": ("header_msgpack", lambda i: [b"\x91" * (1100 + i % 2900) + b"\xc0", *arrays]),
        "ext_type": ("header_msgpack", lambda i: [msgpack.packb(dict(header, stats=msgpack.ExtType(i % 128, b"xyz"))), *arrays]),
        "bad_values": ("values", lambda i: [good[0], good[1], bad_actions, *good[3:]]),
        "whole_too_big": ("oversized", lambda i: [good[0]] + [big] * 8),  # each frame fits MAXMSGSIZE
        "replayed": ("replayed_seq", None),
    }


def monitored_push(ctx, endpoint):
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    sock.connect(endpoint)
    return sock, monitor


def events(monitor, timeout_ms=0):
    out = []
    while monitor.poll(timeout_ms):
        out.append(recv_monitor_message(monitor)["event"])
        timeout_ms = 0
    return out


def send_pending(attackers, pending):
    """Send each attacker's queued messages, oldest first, until its socket would block."""
    for (sock, _), queued in zip(attackers, pending):
        while queued:
            try:
                sock.send_multipart(queued[0], flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            queued.popleft()


def test_ten_thousand_hostile_messages_while_real_actors_feed_the_learner(make_config):
    cfg = make_config(actors=2, envs=1, steps=16, capacity=8192, frame_size=36)
    cfg.transport.max_message_bytes = 1 << 17
    rng = np.random.default_rng(7)
    kinds = hostile_kinds(cfg, rng)
    plan = [kind for kind in kinds for _ in range(PER_KIND)]
    rng.shuffle(plan)
    plan = ["replayed"] * 40 + [k for k in plan if k != "replayed"] + ["replayed"] * (PER_KIND - 40)
    made = {kind: 0 for kind in kinds}
    expected = collections.Counter()

    ctx = zmq.Context.instance()
    process = psutil.Process()
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    endpoints = [f"tcp://127.0.0.1:{cfg.transport.base_port + slot}" for slot in range(cfg.actors)]
    attackers = [monitored_push(ctx, e) for e in endpoints]
    giant, giant_monitor = monitored_push(ctx, endpoints[0])
    mp = spawn_context()
    stop, reports = mp.Event(), mp.Queue()
    procs = [start_process(mp, actor_main, (cfg, slot, stop, reports, 0), f"actor-{slot}") for slot in range(cfg.actors)]
    pending = [collections.deque(), collections.deque()]
    sent, baseline, giant_sent = 0, None, False
    try:
        deadline = time.monotonic() + 150
        tracks = plane.consolidator.tracks
        while (sent < len(plan) or not giant_sent) and time.monotonic() < deadline:
            plane.drain(timeout=0.01)
            if min(t.next_seq for t in tracks) < 2:  # the attack starts once both real actors are landing
                continue
            while sent < len(plan) and sum(map(len, pending)) < 200:
                kind = plan[sent]
                slot = sent % 2
                if kind == "replayed":  # a real actor's (actor_id, incarnation, seq) sent again
                    parts = valid_batch(cfg, actor=slot, incarnation=tracks[slot].incarnation, seq=made[kind] % 2)
                else:
                    parts = kinds[kind][1](made[kind])
                made[kind] += 1
                expected[kinds[kind][0]] += 1
                pending[slot].append(parts)
                sent += 1
            send_pending(attackers, pending)
            if baseline is None and sent >= WARM_UP and plane.consolidator.received >= WARM_UP:
                gc.collect()
                baseline = process.memory_info().rss
            if not giant_sent and sent >= len(plan) // 2:
                giant.send_multipart([valid_batch(cfg)[0], b"\0" * (cfg.transport.max_message_bytes + 1)] + [b""] * 4)
                giant_sent = True
        while any(pending) and time.monotonic() < deadline:
            plane.drain(timeout=0.01)
            send_pending(attackers, pending)
        assert sent == len(plan) and giant_sent and not any(pending), "the attack did not finish"
        assert all(p.is_alive() for p in procs), "a real actor died during the attack"
        giant_events = events(giant_monitor, timeout_ms=10_000)
        stop.set()
        results = []
        while len(results) < cfg.actors and time.monotonic() < deadline:
            plane.drain(timeout=0.02)
            try:
                results.append(reports.get_nowait())
            except queue.Empty:
                pass
        codes = stop_processes(procs, stop, timeout=20)
        results.sort(key=lambda r: r["actor"])
        total = sum(r["sent_transitions"] for r in results)
        actor_batches = sum(r["sent_batches"] for r in results)
        assert plane.wait_for(total, timeout=30)
        while plane.consolidator.received < actor_batches + len(plan) and time.monotonic() < deadline:
            plane.drain(timeout=0.02)
        gc.collect()
        grown = process.memory_info().rss - baseline
        alive = plane.consolidator.is_alive()
        attacker_events = [events(monitor) for _, monitor in attackers]
    finally:
        stop.set()
        for sock, monitor in attackers + [(giant, giant_monitor)]:
            sock.disable_monitor()
            monitor.close()
            sock.close()
        plane.close()
        stop_processes(procs, stop, timeout=5)
    rejects = dict(plane.consolidator.rejects)
    print(
        f"\nhostile messages {len(plan)}: rejects {rejects}; memory growth {grown / 2**20:.1f} MB; "
        f"actors sent {[r['sent_transitions'] for r in results]} transitions; giant sender events {giant_events}"
    )
    assert codes == [0, 0] and len(results) == 2
    assert alive, "the consolidation thread died"
    assert len(plan) >= 10_000
    assert rejects == dict(expected)  # every reject counted under its reason, exactly
    assert plane.consolidator.received == actor_batches + len(plan)  # the giant frame never reached the decoder
    assert plane.stats().per_actor == [r["sent_transitions"] for r in results]  # every real transition landed
    assert plane.processed == total and all(r["sent_transitions"] > 0 for r in results)
    assert grown < MAX_GROWTH, f"RSS grew by {grown / 2**20:.1f} MB"
    assert zmq.EVENT_DISCONNECTED in giant_events  # MAXMSGSIZE: the learner dropped that peer ...
    assert [zmq.EVENT_DISCONNECTED in e for e in attacker_events] == [False, False]  # ... and no other


def test_a_valid_batch_longer_than_a_replay_stream_is_refused_and_counted_not_a_crash(make_config):
    """One well-formed batch whose T exceeds what a replay stream holds (or what the run's actors send) used to reach
    FrameReplay.add and raise on the training thread; validation now refuses it under "field" and the learner goes
    on taking the run's own batches."""
    cfg = make_config(actors=2, envs=1, steps=16, capacity=96, frame_size=36)  # 48 slots per stream
    cfg.actor.batch_steps = 64  # the run's actors send up to 64 steps: one stream's 48 is the bound here
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
    try:
        assert plane.replay.stream_capacity == 48
        push.send_multipart(valid_batch(cfg, steps=60, seq=0))  # the run's actors may send 60; a stream holds 48
        push.send_multipart(valid_batch(cfg, steps=80, seq=1))  # longer than the run's actors send
        push.send_multipart(valid_batch(cfg, steps=16, seq=2))  # a batch the run sends
        deadline = time.monotonic() + 30
        while plane.processed < 16 and time.monotonic() < deadline:
            plane.drain(timeout=0.05)
        assert plane.consolidator.is_alive()
        assert dict(plane.consolidator.rejects) == {"field": 2}
        assert plane.processed == 16 and len(plane.replay) == 16
    finally:
        push.close(linger=0)
        plane.close()
