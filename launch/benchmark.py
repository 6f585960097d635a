"""Measure the data plane, every stage in one run so ratios share one machine state.

    python -m launch.benchmark --actors 2 --seconds 20 --json bench.json

Stages (``--stages``):
  env_ceiling  K bare Mario processes, same preprocessing, random actions: steps/s
  collection   K real actors -> sockets -> consolidation -> replay, no training: transitions/s,
               and efficiency = collection / env_ceiling (with random actions, and with Ape-X
               epsilon-greedy inference)
  transport    synthetic 84x84 batches, no env, through socket, consolidation and replay
  replay       bytes per stored transition; add and sample(512) rates
Every stage warms up before its timed window. Rounds of env_ceiling and collection alternate
(``--rounds``) so slow drift of the machine hits both sides alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import psutil
import torch
import tyro
import zmq

from actors.collector import actor_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.replay import FrameReplay
from learner.weights import WeightServer
from shared import protocol
from shared.config import RunConfig
from shared.env import make_env, num_actions_for
from shared.network import QNetwork


@dataclass
class BenchConfig:
    """What to measure and for how long."""

    actors: int = 2
    """K: env processes / actor processes for env_ceiling and collection."""
    seconds: float = 20.0
    """Timed window of each env_ceiling / collection round, after warm-up."""
    rounds: int = 2
    """Alternating env_ceiling / collection rounds."""
    transport_seconds: float = 10.0
    """Timed window of the transport stage."""
    transport_senders: int = 1
    """Synthetic sender processes in the transport stage."""
    transport_batch: int = 256
    """Frames per synthetic message (one env, T steps)."""
    learner_updates: int = 40
    """Updates per timed epoch in the learner stage."""
    learner_epochs: int = 4
    """Timed epochs per variant in the learner stage (the first is compared with the rest)."""
    stages: tuple[str, ...] = ("env_ceiling", "collection", "transport", "replay", "learner")
    """Stages to run."""
    json: str = ""
    """Write every figure here as JSON."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run configuration used by the stages (env, actor, replay, transport)."""


# ----------------------------------------------------------------------------- env ceiling

def _bare_env_worker(cfg: RunConfig, index: int, start_at: float, seconds: float, out) -> None:
    """One process: warm up, then step with random actions from ``start_at`` for ``seconds``."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    env = make_env(cfg.env, seed=index)
    rng = np.random.default_rng(index)
    env.reset()
    for _ in range(50):  # warm-up
        if any(env.step(int(rng.integers(env.num_actions)))[2:4]):
            env.reset()
    while time.time() < start_at:
        time.sleep(0.001)
    steps, end, cpu0 = 0, start_at + seconds, time.process_time()
    while time.time() < end:
        _, _, term, trunc, _ = env.step(int(rng.integers(env.num_actions)))
        steps += 1
        if term or trunc:
            env.reset()
    out.put((steps, time.process_time() - cpu0))


def env_ceiling(cfg: RunConfig, k: int, seconds: float) -> dict:
    ctx = spawn_context()
    out = ctx.Queue()
    start_at = time.time() + 8.0  # time for K processes to import and warm up
    procs = [start_process(ctx, _bare_env_worker, (cfg, i, start_at, seconds, out), f"env-{i}") for i in range(k)]
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    steps, cpu = sum(r[0] for r in results), sum(r[1] for r in results)
    rate = steps / seconds
    return {"processes": k, "steps_per_s": rate, "frames_per_s": rate * cfg.env.frame_skip,
            "cpu_us_per_step": cpu / steps * 1e6}


def _cpu_seconds(procs: list) -> float:
    """CPU seconds used so far by this process and ``procs``."""
    total = 0.0
    for proc in [psutil.Process()] + [psutil.Process(p.pid) for p in procs]:
        t = proc.cpu_times()
        total += t.user + t.system
    return total


# ----------------------------------------------------------------------------- collection

def collection(cfg: RunConfig, seconds: float) -> dict:
    """Real actors into a real DataPlane; rate of transitions arriving in replay over the timed window."""
    device = torch.device("cpu")
    plane = DataPlane(cfg, num_actions_for(cfg.env), device).start()
    server = WeightServer(cfg.transport)
    server.publish(0, QNetwork(cfg.env.stack, num_actions_for(cfg.env), cfg.env.frame_size))
    server.start()
    ctx = spawn_context()
    stop = ctx.Event()
    procs = [start_process(ctx, actor_main, (cfg, slot, stop, None), f"actor-{slot}") for slot in range(cfg.actors)]
    try:
        deadline = time.monotonic() + 120
        while min(plane.stats().per_actor) == 0 and time.monotonic() < deadline:  # warm-up: every actor delivered
            plane.drain(timeout=0.05)
        warm_end = time.monotonic() + 2.0
        while time.monotonic() < warm_end:
            plane.drain(timeout=0.05)
        start_processed, start, cpu0 = plane.processed, time.monotonic(), _cpu_seconds(procs)
        while time.monotonic() - start < seconds:
            plane.drain(timeout=0.05)
        elapsed, cpu = time.monotonic() - start, _cpu_seconds(procs) - cpu0
        stats = plane.stats()
        rate = (plane.processed - start_processed) / elapsed
        cpu_us = cpu / max(plane.processed - start_processed, 1) * 1e6
    finally:
        stop_processes(procs, stop)
        server.stop()
        plane.close()
    return {"actors": cfg.actors, "transitions_per_s": rate, "cpu_us_per_transition": cpu_us,
            "drops": stats.drops, "rejected": stats.rejected}


# ----------------------------------------------------------------------------- transport

def _synthetic_sender(cfg: RunConfig, slot: int, stop, batch: int) -> None:
    """Push the same pre-built 84x84 batch as fast as the socket takes it (no env)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    size = cfg.env.frame_size
    rng = np.random.default_rng(slot)
    arrays = (rng.integers(0, 256, (1, batch, size, size), dtype=np.uint8), np.zeros((1, batch), np.uint8),
              np.zeros((1, batch), np.float32), np.zeros((1, batch), np.uint8), np.zeros((1, batch), np.uint8))
    arrays[4][0, 0] = 1
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 4)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{cfg.transport.host}:{cfg.transport.base_port + slot}")
    stats = {k: 0.0 for k in protocol.STAT_KEYS}
    seq = 0
    while not stop.is_set():
        parts = protocol.encode_batch(slot, 1, seq, 0, *arrays, stats=stats)
        try:
            sock.send_multipart(parts, copy=False, flags=zmq.NOBLOCK)
            seq += 1
        except zmq.Again:
            time.sleep(0.0005)
    sock.close()


def transport(cfg: RunConfig, senders: int, batch: int, seconds: float) -> dict:
    cfg = RunConfig.from_json(cfg.to_json())
    cfg.actors, cfg.actor.envs_per_actor, cfg.actor.batch_steps = senders, 1, batch
    cfg.replay.capacity = max(cfg.replay.capacity, senders * 4 * batch)
    cfg.validate()
    plane = DataPlane(cfg, num_actions_for(cfg.env), torch.device("cpu")).start()
    ctx = spawn_context()
    stop = ctx.Event()
    procs = [start_process(ctx, _synthetic_sender, (cfg, slot, stop, batch), f"sender-{slot}") for slot in range(senders)]
    try:
        warm_end = time.monotonic() + 3.0
        while time.monotonic() < warm_end:
            plane.drain(timeout=0.05)
        start_processed, start = plane.processed, time.monotonic()
        cpu_start = psutil.Process().cpu_times()
        while time.monotonic() - start < seconds:
            plane.drain(timeout=0.05)
        elapsed = time.monotonic() - start
        cpu = psutil.Process().cpu_times()
        rate = (plane.processed - start_processed) / elapsed
    finally:
        stop_processes(procs, stop)
        plane.close()
    frame_bytes = cfg.env.frame_size ** 2
    learner_cpu = (cpu.user + cpu.system - cpu_start.user - cpu_start.system) / elapsed
    return {"senders": senders, "batch_frames": batch, "transitions_per_s": rate,
            "mb_per_s": rate * (frame_bytes + 7) / 1e6, "learner_cpu_cores": learner_cpu,
            "rejected": plane.stats().rejected}


# ----------------------------------------------------------------------------- replay

def replay_stage(cfg: RunConfig) -> dict:
    size = cfg.env.frame_size
    replay = FrameReplay(num_streams=8, capacity=100_000, frame_shape=(size, size), stack=cfg.env.stack,
                         n_step=cfg.replay.n_step, gamma=cfg.replay.gamma)
    rng = np.random.default_rng(0)
    t = 64
    frames = rng.integers(0, 256, (1, t, size, size), dtype=np.uint8)
    actions = np.zeros((1, t), np.uint8)
    terminated = np.zeros((1, t), bool)
    first = terminated.copy()
    first[0, 0] = True
    rewards = np.zeros((1, t), np.float32)
    add_times = []
    for i in range(8 * 100_000 // (8 * t) + 8):  # fill, wrapping
        s0 = time.perf_counter()
        replay.add(i % 8, frames, actions, rewards, terminated, first)
        add_times.append(time.perf_counter() - s0)
    for _ in range(5):
        replay.sample(512)
    sample_times = []
    for _ in range(50):
        s0 = time.perf_counter()
        replay.sample(512)
        sample_times.append(time.perf_counter() - s0)
    add_s = statistics.median(add_times[50:])
    sample_s = statistics.median(sample_times)
    naive_stacked = 2 * cfg.env.stack * size * size  # obs + next_obs stacks, uint8
    return {"bytes_per_transition": replay.bytes_per_transition, "naive_uint8_stacked_bytes": naive_stacked,
            "naive_float32_bytes": naive_stacked * 4, "add_64_transitions_ms": add_s * 1e3,
            "add_transitions_per_s": t / add_s, "sample_512_ms": sample_s * 1e3, "samples_per_s": 512 / sample_s}


# ----------------------------------------------------------------------------- learner

def _filled_replay(cfg: RunConfig, device: torch.device, streams: int = 8, per_stream: int = 4096) -> FrameReplay:
    size = cfg.env.frame_size
    replay = FrameReplay(streams, streams * per_stream, (size, size), cfg.env.stack, cfg.replay.n_step,
                         cfg.replay.gamma, device)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (streams, per_stream, size, size), dtype=np.uint8)
    actions = rng.integers(0, num_actions_for(cfg.env), (streams, per_stream), dtype=np.uint8)
    rewards = rng.normal(size=(streams, per_stream)).astype(np.float32)
    first = np.zeros((streams, per_stream), bool)
    first[:, ::200] = True  # 200-step episodes
    terminated = np.roll(first, -1, axis=1)
    replay.add(0, frames, actions, rewards, terminated, first)
    return replay


def learner_stage(cfg: RunConfig, device: torch.device, updates_per_epoch: int, epochs: int) -> dict:
    """Learner alone on a filled replay: fp32 eager, AMP, AMP + compile, each without and with accumulation."""
    from learner.trainer import DQNLearner
    replay = _filled_replay(cfg, device)
    base = cfg.learner.resolved(device.type)
    amp = "auto" if device.type == "cuda" else "bf16"
    variants = [("fp32_eager", "off", False), ("amp_eager", amp, False), ("amp_compiled", amp, True)]
    out: dict = {"device": str(device), "micro_batch": base.micro_batch}
    for name, amp_mode, compiled in variants:
        for accum in (1, 4):
            lc = dataclasses.replace(base, accum_steps=accum, amp=amp_mode, compile=compiled)
            dqn = DQNLearner(lc, cfg.env.stack, num_actions_for(cfg.env), cfg.env.frame_size, device)
            compile_s = dqn.warm_up(replay) if compiled else 0.0
            if not compiled:
                dqn.warm_up(replay)  # eager warm-up too: allocator, kernels, the optimizer's first step
            rates = []
            for _ in range(epochs):
                start = time.perf_counter()
                for _ in range(updates_per_epoch):
                    dqn.update(replay)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                rates.append(updates_per_epoch / (time.perf_counter() - start))
            steady = statistics.mean(rates[1:]) if len(rates) > 1 else rates[0]
            key = f"{name}_accum{accum}"
            out[key] = {"updates_per_s": steady, "samples_per_s": steady * dqn.effective_batch,
                        "effective_batch": dqn.effective_batch, "compile_seconds": compile_s,
                        "first_epoch_ratio": rates[0] / steady}
            print(f"learner {key}: {steady * dqn.effective_batch:,.0f} samples/s, {steady:.2f} updates/s, "
                  f"first epoch {rates[0] / steady:.0%} of steady, compile {compile_s:.1f}s", flush=True)
    for accum in (1, 4):
        out[f"speedup_amp_compiled_vs_fp32_accum{accum}"] = (out[f"amp_compiled_accum{accum}"]["samples_per_s"]
                                                             / out[f"fp32_eager_accum{accum}"]["samples_per_s"])
    return out


# ----------------------------------------------------------------------------- main

def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "torch": torch.__version__, "python": platform.python_version(), "numpy": np.__version__,
            "pyzmq": zmq.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def main(bench: BenchConfig) -> dict:
    cfg = bench.run
    cfg.actors = bench.actors
    cfg.collect_only = True
    cfg.validate()
    result: dict = {"machine": machine()}
    print(f"machine: {result['machine']}", flush=True)
    if "env_ceiling" in bench.stages or "collection" in bench.stages:
        ceilings, collections, collections_random = [], [], []
        for r in range(bench.rounds):
            if "env_ceiling" in bench.stages:
                ceilings.append(env_ceiling(cfg, bench.actors, bench.seconds))
                print(f"round {r} env_ceiling: {ceilings[-1]['steps_per_s']:.1f} steps/s", flush=True)
            if "collection" in bench.stages:
                random_cfg = RunConfig.from_json(cfg.to_json())
                random_cfg.actor.epsilon = 1.0
                collections_random.append(collection(random_cfg, bench.seconds))
                print(f"round {r} collection (random actions): "
                      f"{collections_random[-1]['transitions_per_s']:.1f} transitions/s", flush=True)
                collections.append(collection(cfg, bench.seconds))
                print(f"round {r} collection (Ape-X eps-greedy): {collections[-1]['transitions_per_s']:.1f} "
                      f"transitions/s", flush=True)
        if ceilings:
            result["env_ceiling"] = {"rounds": ceilings,
                                     "steps_per_s": statistics.mean(c["steps_per_s"] for c in ceilings)}
        if collections:
            random_rate = statistics.mean(c["transitions_per_s"] for c in collections_random)
            apex_rate = statistics.mean(c["transitions_per_s"] for c in collections)
            result["collection"] = {"rounds_random": collections_random, "rounds_apex": collections,
                                    "transitions_per_s_random": random_rate, "transitions_per_s_apex": apex_rate}
            if ceilings:
                ceiling = result["env_ceiling"]["steps_per_s"]
                result["collection"]["efficiency_random"] = random_rate / ceiling
                result["collection"]["efficiency_apex"] = apex_rate / ceiling
                # CPU cost per transition, all processes (actors + learner) vs bare env: robust to outside load
                bare_us = statistics.mean(c["cpu_us_per_step"] for c in ceilings)
                result["env_ceiling"]["cpu_us_per_step"] = bare_us
                for kind, rounds in (("random", collections_random), ("apex", collections)):
                    us = statistics.mean(c["cpu_us_per_transition"] for c in rounds)
                    result["collection"][f"cpu_us_per_transition_{kind}"] = us
                    result["collection"][f"cpu_efficiency_{kind}"] = bare_us / us
    if "transport" in bench.stages:
        result["transport"] = transport(cfg, bench.transport_senders, bench.transport_batch, bench.transport_seconds)
        print(f"transport: {result['transport']['transitions_per_s']:,.0f} transitions/s, "
              f"{result['transport']['mb_per_s']:,.0f} MB/s", flush=True)
    if "replay" in bench.stages:
        result["replay"] = replay_stage(cfg)
        print(f"replay: {result['replay']}", flush=True)
    if "learner" in bench.stages:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        result["learner"] = learner_stage(cfg, device, bench.learner_updates, bench.learner_epochs)
    print(render_table(result), flush=True)
    if bench.json:
        with open(bench.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


def render_table(r: dict) -> str:
    rows = ["| figure | value |", "|---|---|"]
    if "env_ceiling" in r:
        rows.append(f"| env ceiling, {r['env_ceiling']['rounds'][0]['processes']} bare Mario processes | "
                    f"{r['env_ceiling']['steps_per_s']:,.1f} steps/s |")
    if "collection" in r:
        c = r["collection"]
        for kind, label in (("random", "random actions"), ("apex", "Ape-X eps-greedy")):
            text = f"| collection into replay, {label} | {c['transitions_per_s_' + kind]:,.1f} transitions/s"
            if f"efficiency_{kind}" in c:
                text += (f" ({c['efficiency_' + kind]:.1%} of ceiling; CPU per transition "
                         f"{c['cpu_us_per_transition_' + kind]:,.0f} us = {c['cpu_efficiency_' + kind]:.1%} "
                         f"of bare {r['env_ceiling']['cpu_us_per_step']:,.0f} us)")
            rows.append(text + " |")
    if "transport" in r:
        t = r["transport"]
        rows.append(f"| transport ceiling (synthetic 84x84, {t['senders']} sender) | {t['transitions_per_s']:,.0f} "
                    f"transitions/s, {t['mb_per_s']:,.0f} MB/s |")
    if "replay" in r:
        p = r["replay"]
        rows.append(f"| replay bytes per transition | {p['bytes_per_transition']:,} (naive uint8 stacks "
                    f"{p['naive_uint8_stacked_bytes']:,}, float32 {p['naive_float32_bytes']:,}) |")
        rows.append(f"| replay sample(512) | {p['sample_512_ms']:.2f} ms ({p['samples_per_s']:,.0f} samples/s) |")
    if "learner" in r:
        lr_ = r["learner"]
        for key in ("fp32_eager", "amp_eager", "amp_compiled"):
            for accum in (1, 4):
                v = lr_[f"{key}_accum{accum}"]
                rows.append(f"| learner {key.replace('_', ' ')}, batch {lr_['micro_batch']} x {accum} ({lr_['device']}) | "
                            f"{v['samples_per_s']:,.0f} samples/s, {v['updates_per_s']:.2f} updates/s, first epoch "
                            f"{v['first_epoch_ratio']:.0%} of steady" + (f", compile {v['compile_seconds']:.1f} s"
                                                                       if v['compile_seconds'] else "") + " |")
        for accum in (1, 4):
            rows.append(f"| AMP + compile vs fp32 eager, x{accum} accumulation | "
                        f"{lr_[f'speedup_amp_compiled_vs_fp32_accum{accum}']:.2f}x |")
    return "\n".join(rows)


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
