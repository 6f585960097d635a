"""Stages replay and priority: bytes per stored transition, add and sample rates; prioritized against uniform."""

from __future__ import annotations

import statistics
import time
from typing import Any, cast

import numpy as np
import torch

from learner.replay.frame_ring import FrameReplay
from learner.replay.prioritized import PrioritizedReplay
from shared.config import RunConfig


def _replay(cfg: RunConfig, capacity: int, prioritized: bool = False) -> FrameReplay:
    """8 streams of the run's square frames, stack, n-step and gamma; prioritized with the run's alpha."""
    size = cfg.env.frame_size
    args: tuple[Any, ...] = (8, capacity, (size, size), cfg.env.stack, cfg.replay.n_step, cfg.replay.gamma)
    return PrioritizedReplay(*args, alpha=cfg.replay.priority_alpha) if prioritized else FrameReplay(*args)


def replay_stage(cfg: RunConfig) -> dict:
    size = cfg.env.frame_size
    replay = _replay(cfg, 100_000)
    rng = np.random.default_rng(0)
    t = 64
    frames = rng.integers(0, 256, (1, t, size, size), dtype=np.uint8)
    actions, terminated, rewards = np.zeros((1, t), np.uint8), np.zeros((1, t), bool), np.zeros((1, t), np.float32)
    first = terminated.copy()
    first[0, 0] = True
    add_times = []
    for i in range(8 * 100_000 // (8 * t) + 8):  # fill, wrapping
        s0 = time.perf_counter()
        replay.add(i % 8, frames, actions, rewards, terminated, first)
        add_times.append(time.perf_counter() - s0)
    sample_times = []
    for _ in range(55):  # the first 5 warm up
        s0 = time.perf_counter()
        replay.sample(512)
        sample_times.append(time.perf_counter() - s0)
    add_s = statistics.median(add_times[50:])
    sample_s = statistics.median(sample_times[5:])
    naive_stacked = 2 * cfg.env.stack * size * size  # obs + next_obs stacks, uint8
    return {
        "bytes_per_transition": replay.bytes_per_transition,
        "naive_uint8_stacked_bytes": naive_stacked,
        "naive_float32_bytes": naive_stacked * 4,
        "add_64_transitions_ms": add_s * 1e3,
        "add_transitions_per_s": t / add_s,
        "sample_512_ms": sample_s * 1e3,
        "samples_per_s": 512 / sample_s,
    }


def priority_stage(cfg: RunConfig, capacities: tuple[int, ...], batches: tuple[int, ...], repeats: int = 30) -> dict:
    """Per capacity and batch size, uniform vs prioritized: median ms of sample(B), of choosing its B slots alone (what
    prioritization changes), and of update_priorities(B), on 8 streams filled past wrap-around; one replay at a time."""
    out: dict[str, Any] = {}  # "{kind}_{capacity}_{batch}": the timings; "capacities", "batches": the lists
    rng = np.random.default_rng(0)
    for capacity in capacities:
        for kind in ("uniform", "prioritized"):
            replay = _replay(cfg, capacity, prioritized=kind == "prioritized")
            t = min(4096, replay.stream_capacity)
            frames = rng.integers(0, 256, (8, t, *replay.frame_shape), dtype=np.uint8)
            first = np.zeros((8, t), bool)
            first[:, ::200] = True
            terminated = np.roll(first, -1, axis=1)
            zeros_a, rewards = np.zeros((8, t), np.uint8), np.ones((8, t), np.float32)
            for _ in range(replay.stream_capacity // t + 2):  # fill and wrap
                prio = rng.random((8, t)).astype(np.float32) if kind == "prioritized" else None
                replay.add(0, frames, zeros_a, rewards, terminated, first, prio)
            lo, counts = replay._ranges(replay.heads)
            for batch in batches:
                spans = []  # seconds of sample(B), of update_priorities(B), of choosing B slots
                for _ in range(repeats + 3):
                    s0 = time.perf_counter()
                    drawn = replay.sample(batch, beta=0.5)
                    s1 = time.perf_counter()
                    if kind == "prioritized":
                        cast(PrioritizedReplay, replay).update_priorities(drawn["stream"], drawn["slot"], torch.rand(batch))
                    s2 = time.perf_counter()
                    stream, slot = replay._draw(lo, counts, None)(batch)  # choosing the slots, without the frames
                    replay._sampled(stream, slot, counts, 0.5)
                    spans.append((s1 - s0, s2 - s1, time.perf_counter() - s2))
                key = f"{kind}_{capacity}_{batch}"
                timed = zip(("sample_ms", "update_ms", "draw_ms"), zip(*spans[3:]))  # the first 3 warm up
                out[key] = {name: statistics.median(s * 1e3 for s in seconds) for name, seconds in timed}
                print(f"priority: {kind} capacity {capacity:,} batch {batch}: {out[key]}", flush=True)
            del replay, frames
    out["capacities"], out["batches"] = list(capacities), list(batches)
    return out


def render_priority_table(p: dict) -> str:
    rows = [
        "| capacity | batch | uniform: draw / whole sample | prioritized: draw / whole sample | prioritized "
        "update | prioritized draw + update vs uniform draw |",
        "|---|---|---|---|---|---|",
    ]
    for capacity in p["capacities"]:
        for batch in p["batches"]:
            u, q = p[f"uniform_{capacity}_{batch}"], p[f"prioritized_{capacity}_{batch}"]
            rows.append(
                f"| {capacity:,} | {batch} | {u['draw_ms']:.2f} / {u['sample_ms']:.2f} ms | {q['draw_ms']:.2f} / "
                f"{q['sample_ms']:.2f} ms | {q['update_ms']:.2f} ms | {(q['draw_ms'] + q['update_ms']) / u['draw_ms']:.1f}x |"
            )
    return "\n".join(rows)
