"""Stages env_ceiling and collection: bare envs in K processes, then K real actors into replay."""

from __future__ import annotations

import signal
import time
from typing import Any

import numpy as np
import psutil
import torch

from actors.collector import actor_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.weight_server import WeightServer
from shared.config import RunConfig
from shared.envs import entry_for, env_spec, make_env, make_vector_env
from shared.network import build_q_network


def _bare_env_worker(cfg: RunConfig, index: int, go, seconds: float, out) -> None:
    """One process: warm up, say so, wait for ``go`` (all K warm), then step random (valid) actions for ``seconds``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    rng = np.random.default_rng(index)
    if entry_for(cfg.env).make_single is None:
        n, warm_up = cfg.actor.envs_per_actor, 20
        venv = make_vector_env(cfg.env, [index * 4096 + e for e in range(n)])
        venv.reset()

        def tick() -> None:
            mask = venv.action_mask()
            venv.step(np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1))
    else:
        n, warm_up = 1, 50
        env = make_env(cfg.env, seed=index)
        env.reset()

        def tick() -> None:
            if any(env.step(int(rng.integers(env.num_actions)))[2:4]):  # terminated or truncated
                env.reset()

    for _ in range(warm_up):
        tick()
    out.put("ready")
    go.wait()
    steps, end, cpu0 = 0, time.monotonic() + seconds, time.process_time()
    while time.monotonic() < end:
        tick()
        steps += n
    out.put((steps, time.process_time() - cpu0))


def env_ceiling(cfg: RunConfig, k: int, seconds: float) -> dict:
    ctx = spawn_context()
    out, go = ctx.Queue(), ctx.Event()
    procs = [start_process(ctx, _bare_env_worker, (cfg, i, go, seconds, out), f"env-{i}") for i in range(k)]
    for _ in procs:
        out.get(timeout=120)  # every process imported, built its env and warmed up
    go.set()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    steps, cpu = sum(r[0] for r in results), sum(r[1] for r in results)
    rate = steps / seconds
    return {
        "processes": k,
        "env": cfg.env.name,
        "steps_per_s": rate,
        "frames_per_s": rate * cfg.env.frame_skip,
        "cpu_us_per_step": cpu / steps * 1e6,
    }


def exit_reports(report_queue: Any, count: int) -> list[dict]:
    """Up to ``count`` actors' exit reports; one that sent none (killed on its way out) ends them: missing, not invented."""
    out = []
    for _ in range(count):
        try:
            out.append(report_queue.get(timeout=10.0))
        except Exception:  # queue.Empty, or a queue its writer broke
            break
    return out


def cpu_seconds(procs: list) -> float:
    """CPU seconds used so far by this process and ``procs``."""
    times = [proc.cpu_times() for proc in [psutil.Process()] + [psutil.Process(p.pid) for p in procs]]
    return sum((t.user + t.system for t in times), 0.0)


def collection(cfg: RunConfig, seconds: float) -> dict:
    """Real actors into a real DataPlane: each actor's rate runs from its first message in the window to its last (a
    count in a fixed window is exact only to a whole message), the window until each has sent 3 (at most 10x)."""
    device = torch.device("cpu")
    spec = env_spec(cfg.env)
    plane = DataPlane(cfg, spec, device).start()
    server = WeightServer(cfg.transport)
    server.publish(0, build_q_network(spec, dueling=cfg.net.dueling))
    server.start()
    ctx = spawn_context()
    stop, reports = ctx.Event(), ctx.Queue()
    procs = [start_process(ctx, actor_main, (cfg, slot, stop, reports), f"actor-{slot}") for slot in range(cfg.actors)]
    try:
        deadline = time.monotonic() + 120
        while min(plane.stats().per_actor) == 0 and time.monotonic() < deadline:  # warm-up: every actor delivered
            plane.drain(timeout=0.05)
        warm_end = time.monotonic() + 2.0
        while time.monotonic() < warm_end:
            plane.drain(timeout=0.05)
        arrivals: list[list[tuple[float, int]]] = [[] for _ in range(cfg.actors)]  # (time, accepted) per message
        counts = plane.accepted_per_actor()
        start, cpu0 = time.monotonic(), cpu_seconds(procs)
        while True:
            now = time.monotonic()
            if now - start >= seconds and min(map(len, arrivals)) >= 3 or now - start >= 10 * seconds:
                break
            plane.drain(timeout=0.05)
            now, latest = time.monotonic(), plane.accepted_per_actor()
            for slot, (before, after) in enumerate(zip(counts, latest)):
                if after != before:
                    arrivals[slot].append((now, after))
            counts = latest
        elapsed, cpu = time.monotonic() - start, cpu_seconds(procs) - cpu0
        stats = plane.stats()
        rates = [(a[-1][1] - a[0][1]) / (a[-1][0] - a[0][0]) if len(a) >= 2 else 0.0 for a in arrivals]
        rate = sum(rates)
        cpu_us = cpu / max(rate * elapsed, 1.0) * 1e6
    finally:
        stop_processes(procs, stop)
        server.stop()
        plane.close()
    ended = exit_reports(reports, len(procs))  # the share of each actor's loop's time spent inside its envs' step
    run = sum(r["run_seconds"] for r in ended)
    env_share = sum(r["env_seconds"] for r in ended) / run if len(ended) == len(procs) and run > 0 else None
    return {
        "actors": cfg.actors,
        "transitions_per_s": rate,
        "cpu_us_per_transition": cpu_us,
        "messages": [len(a) for a in arrivals],
        "seconds": elapsed,
        "actor_env_share": env_share,
        "drops": stats.drops,
        "rejected": stats.rejected,
    }
