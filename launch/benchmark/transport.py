"""Stage transport: synthetic 84x84 batches through socket, consolidation and replay (no env)."""

from __future__ import annotations

import signal
import time

import numpy as np
import torch
import zmq

from launch.benchmark.collection import cpu_seconds
from launch.processes import orphan_check, spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from shared.config import RunConfig
from shared.config_migration import read_config
from shared.envs import env_spec
from shared.wire import protocol
from shared.wire.links import open_socket


def _synthetic_sender(cfg: RunConfig, slot: int, stop, batch: int) -> None:
    """Push the same pre-built 84x84 batch as fast as the socket takes it (no env)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    size = cfg.env.frame_size
    rng = np.random.default_rng(slot)
    frames = rng.integers(0, 256, (1, batch, size, size), dtype=np.uint8)
    arrays = (frames, np.zeros((1, batch), np.uint8), np.zeros((1, batch), np.float32))
    flags = (np.zeros((1, batch), np.uint8), np.zeros((1, batch), np.uint8))  # terminated, first
    flags[1][0, 0] = 1  # one episode start
    sock = open_socket(zmq.Context.instance(), zmq.PUSH, cfg.transport, server=False, send_hwm=4)
    sock.connect(f"tcp://{cfg.transport.host}:{cfg.transport.base_port + slot}")
    stats = {k: 0.0 for k in protocol.STAT_KEYS}
    seq = 0
    orphaned = orphan_check()
    while not stop.is_set() and not orphaned():
        parts = protocol.encode_batch(slot, 1, seq, 0, *arrays, *flags, stats=stats)
        try:
            sock.send_multipart(parts, copy=False, flags=zmq.NOBLOCK)
            seq += 1
        except zmq.Again:
            time.sleep(0.0005)
    sock.close(linger=0)  # drop what is queued, and wait until ZeroMQ has let go of the arrays before the process
    zmq.Context.instance().term()  # exits and frees them under its I/O thread (actors/sender.py says more)


def transport(cfg: RunConfig, senders: int, batch: int, seconds: float) -> dict:
    cfg = read_config(cfg.to_json())
    cfg.actors, cfg.actor.envs_per_actor, cfg.actor.batch_steps = senders, 1, batch
    cfg.learner.exact_ratio = False  # the pipe's own ceiling: no learner to hold a ratio for, default socket buffers
    cfg.replay.capacity = max(cfg.replay.capacity, senders * 4 * batch)
    cfg.validate()
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    ctx = spawn_context()
    stop = ctx.Event()
    procs = [start_process(ctx, _synthetic_sender, (cfg, slot, stop, batch), f"sender-{slot}") for slot in range(senders)]
    try:
        warm_end = time.monotonic() + 3.0
        while time.monotonic() < warm_end:
            plane.drain(timeout=0.05)
        start_processed, start, cpu0 = plane.processed, time.monotonic(), cpu_seconds([])
        while time.monotonic() - start < seconds:
            plane.drain(timeout=0.05)
        elapsed, cpu = time.monotonic() - start, cpu_seconds([]) - cpu0
        rate = (plane.processed - start_processed) / elapsed
    finally:
        stop_processes(procs, stop)
        plane.close()
    return {
        "senders": senders,
        "batch_frames": batch,
        "transitions_per_s": rate,
        "mb_per_s": rate * (cfg.env.frame_size**2 + 7) / 1e6,  # a frame's bytes and the transition's own
        "learner_cpu_cores": cpu / elapsed,
        "rejected": plane.stats().rejected,
    }
