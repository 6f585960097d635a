"""Measure the data plane, every stage in one run so ratios share one machine state.

    python -m launch.benchmark --actors 2 --seconds 20 --json bench.json

Stages (``--stages``):
  env_ceiling  K bare Mario processes, same preprocessing, random actions: steps/s (Snake and fuel breaks,
               ``--run.env.name snake|fuelbreak``: K processes each stepping one vector env of
               ``--run.actor.envs-per-actor`` envs with random valid actions: transitions/s)
  collection   K real actors -> sockets -> consolidation -> replay, no training: transitions/s,
               and efficiency = collection / env_ceiling (with random actions, and with Ape-X
               epsilon-greedy inference)
  transport    synthetic 84x84 batches, no env, through socket, consolidation and replay
  replay       bytes per stored transition; add and sample(512) rates
  priority     prioritized vs uniform replay: sample and priority-update cost per batch of 512 and 2048
               at capacity 100K and 1M (84x84 frames: 1M slots take 7 GB per replay, one at a time)
  learner      the learner alone on a filled replay: fp32 eager, AMP, AMP + compile, each with and
               without gradient accumulation; compile time apart
  system       the whole system twice, same actors, same seconds: the seed's *original* pipeline
               (launch/original.py: one lock-protected multiprocessing queue, batch 256, fp32, no
               compile, sync every 3 epochs) and warppipe's *optimized* one (per-actor sockets, batch
               512 x 4 accumulation, AMP, compile, sync every 5); the seed's table with both columns
``--quick`` shrinks every window so the whole run takes under 3 minutes on 2 CPU cores.
Every stage warms up before its timed window. Rounds of env_ceiling and collection alternate
(``--rounds``) so slow drift of the machine hits both sides alike.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psutil
import torch
import tyro
import zmq

from actors.collector import actor_main
from launch.original import OriginalLearner, OriginalSettings, original_collector_main
from launch.processes import orphan_check, spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.prioritized_replay import PrioritizedReplay
from learner.replay import FrameReplay
from learner.weights import WeightServer
from shared import protocol
from shared.protocol import action_dtype
from shared.config import VECTOR_ENVS, RunConfig
from shared.env import make_env, num_actions_for
from shared.network import QNetwork, build_q_network
from shared.vec_env import env_spec, make_vector_env


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
    system_seconds: float = 60.0
    """Timed window of each whole-system run (original, optimized), after replay holds system_min_replay."""
    system_min_replay: int = 2000
    """Transitions in replay before the whole-system runs start training (and their clocks)."""
    system_min_epochs: int = 2
    """Each whole-system run trains past system_seconds until it has this many epochs (a slow machine still gives
    rates measured over whole epochs)."""
    system_updates_per_epoch: int = 5
    """Updates per epoch in both whole-system runs (the unit of epoch time and of the sync periods)."""
    optimized_micro_batch: int = 512
    """Optimized system: samples per micro-batch."""
    optimized_accum: int = 4
    """Optimized system: micro-batches accumulated per update."""
    optimized_sync_every: int = 5
    """Optimized system: epochs between weight broadcasts."""
    original: OriginalSettings = field(default_factory=OriginalSettings)
    """The seed's original pipeline (launch/original.py)."""
    stages: tuple[str, ...] = ("env_ceiling", "collection", "transport", "replay", "learner", "system")
    """Stages to run (also: priority, not in the default list: it fills 7 GB replays)."""
    priority_capacities: tuple[int, ...] = (100_000, 1_000_000)
    """Replay capacities of the priority stage."""
    priority_batches: tuple[int, ...] = (512, 2048)
    """Batch sizes of the priority stage."""
    quick: bool = False
    """Short windows (every option still at its default is shrunk): the whole run in under 3 minutes on 2 cores."""
    json: str = ""
    """Write every figure here as JSON."""
    env: str = ""
    """Shorthand for --run.env.name (mario, catch, fake, snake, fuelbreak); empty: --run.env.name's value."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run configuration used by the stages (env, actor, replay, transport)."""


# Values --quick gives to options left at their defaults.
QUICK = dict(seconds=5.0, rounds=1, transport_seconds=3.0, learner_updates=4, learner_epochs=2,
             system_seconds=20.0, system_min_replay=1000, system_updates_per_epoch=2)

STAGES = ("env_ceiling", "collection", "transport", "replay", "priority", "learner", "system")


def apply_quick(bench: BenchConfig) -> BenchConfig:
    defaults = BenchConfig()
    for name, value in QUICK.items():
        if getattr(bench, name) == getattr(defaults, name):
            setattr(bench, name, value)
    return bench


# ----------------------------------------------------------------------------- env ceiling

def _bare_env_worker(cfg: RunConfig, index: int, go, seconds: float, out) -> None:
    """One process: warm up, say so, wait for ``go`` (all K warm), then step with random actions for ``seconds``."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    if cfg.env.name in VECTOR_ENVS:
        return _bare_vector_worker(cfg, index, go, seconds, out)
    env = make_env(cfg.env, seed=index)
    rng = np.random.default_rng(index)
    env.reset()
    for _ in range(50):  # warm-up
        if any(env.step(int(rng.integers(env.num_actions)))[2:4]):
            env.reset()
    out.put("ready")
    go.wait()
    steps, end, cpu0 = 0, time.monotonic() + seconds, time.process_time()
    while time.monotonic() < end:
        _, _, term, trunc, _ = env.step(int(rng.integers(env.num_actions)))
        steps += 1
        if term or trunc:
            env.reset()
    out.put((steps, time.process_time() - cpu0))


def _bare_vector_worker(cfg: RunConfig, index: int, go, seconds: float, out) -> None:
    """The same for a vector env (Snake, fuel breaks): one step(actions[E]) per tick, random valid actions."""
    n = cfg.actor.envs_per_actor
    env = make_vector_env(cfg.env, [index * 4096 + e for e in range(n)])
    rng = np.random.default_rng(index)
    env.reset()

    def tick() -> None:
        mask = env.action_mask()
        env.step(np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1))

    for _ in range(20):  # warm-up
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
    return {"processes": k, "env": cfg.env.name, "steps_per_s": rate, "frames_per_s": rate * cfg.env.frame_skip,
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
    spec = env_spec(cfg.env)
    plane = DataPlane(cfg, spec.num_actions, device).start()
    server = WeightServer(cfg.transport)
    server.publish(0, build_q_network(spec, dueling=cfg.net.dueling))
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
    orphaned = orphan_check()
    while not stop.is_set() and not orphaned():
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


# ----------------------------------------------------------------------------- priority

def priority_stage(cfg: RunConfig, capacities: tuple[int, ...], batches: tuple[int, ...], repeats: int = 30) -> dict:
    """Per capacity and batch size: median ms of sample(B), of choosing its B slots alone (the draw, plus IS
    weights when prioritized: what prioritization changes; the rest of a sample, gathering 2B stacks of frames,
    is the same code for both), and of update_priorities(B), uniform vs prioritized.

    8 streams, filled past wrap-around with 84x84 frames, 200-step episodes, random actor priorities;
    one replay in memory at a time. Uniform replay has no priority update (0 ms)."""
    size, out = cfg.env.frame_size, {}
    rng = np.random.default_rng(0)
    for capacity in capacities:
        for kind in ("uniform", "prioritized"):
            kwargs = dict(num_streams=8, capacity=capacity, frame_shape=(size, size), stack=cfg.env.stack,
                          n_step=cfg.replay.n_step, gamma=cfg.replay.gamma)
            replay = PrioritizedReplay(**kwargs, alpha=cfg.replay.priority_alpha) if kind == "prioritized" \
                else FrameReplay(**kwargs)
            t = min(4096, replay.stream_capacity)
            frames = rng.integers(0, 256, (8, t, size, size), dtype=np.uint8)
            first = np.zeros((8, t), bool)
            first[:, ::200] = True
            terminated = np.roll(first, -1, axis=1)
            zeros_a, rewards = np.zeros((8, t), np.uint8), np.ones((8, t), np.float32)
            for _ in range(replay.stream_capacity // t + 2):  # fill and wrap
                prio = rng.random((8, t)).astype(np.float32) if kind == "prioritized" else None
                replay.add(0, frames, zeros_a, rewards, terminated, first, prio)
            lo, counts = replay._ranges(replay.heads)
            for batch in batches:
                sample_ms, update_ms, draw_ms = [], [], []
                for i in range(repeats + 3):  # the first 3 warm up
                    s0 = time.perf_counter()
                    drawn = replay.sample(batch, beta=0.5)
                    s1 = time.perf_counter()
                    if kind == "prioritized":
                        replay.update_priorities(drawn["stream"], drawn["slot"], torch.rand(batch))
                    s2 = time.perf_counter()
                    stream, slot = replay._draw(lo, counts, None)(batch)  # choosing the slots, without the frames
                    replay._sampled(stream, slot, counts, 0.5)
                    s3 = time.perf_counter()
                    if i >= 3:
                        sample_ms.append((s1 - s0) * 1e3)
                        update_ms.append((s2 - s1) * 1e3)
                        draw_ms.append((s3 - s2) * 1e3)
                out[f"{kind}_{capacity}_{batch}"] = {"sample_ms": statistics.median(sample_ms),
                                                     "update_ms": statistics.median(update_ms),
                                                     "draw_ms": statistics.median(draw_ms)}
                print(f"priority: {kind} capacity {capacity:,} batch {batch}: "
                      f"{out[f'{kind}_{capacity}_{batch}']}", flush=True)
            del replay, frames
    out["capacities"], out["batches"] = list(capacities), list(batches)
    return out


def render_priority_table(p: dict) -> str:
    rows = ["| capacity | batch | uniform: draw / whole sample | prioritized: draw / whole sample | prioritized "
            "update | prioritized draw + update vs uniform draw |", "|---|---|---|---|---|---|"]
    for capacity in p["capacities"]:
        for batch in p["batches"]:
            u, q = p[f"uniform_{capacity}_{batch}"], p[f"prioritized_{capacity}_{batch}"]
            rows.append(f"| {capacity:,} | {batch} | {u['draw_ms']:.2f} / {u['sample_ms']:.2f} ms | "
                        f"{q['draw_ms']:.2f} / {q['sample_ms']:.2f} ms | {q['update_ms']:.2f} ms | "
                        f"{(q['draw_ms'] + q['update_ms']) / u['draw_ms']:.1f}x |")
    return "\n".join(rows)


# ----------------------------------------------------------------------------- learner

def _filled_replay(cfg: RunConfig, device: torch.device, streams: int = 8, per_stream: int = 4096) -> FrameReplay:
    """A replay of the run's env spec (shape, dtype, stack, masks) filled with random 200-step episodes."""
    spec = env_spec(cfg.env)
    replay = FrameReplay(streams, streams * per_stream, tuple(spec.obs_shape), spec.stack, cfg.replay.n_step,
                         cfg.replay.gamma, device, obs_dtype=spec.obs_dtype, num_actions=spec.num_actions,
                         masked=spec.masked)
    rng = np.random.default_rng(0)
    shape = (streams, per_stream, *spec.obs_shape)
    if spec.obs_dtype == "uint8":
        frames = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        frames = rng.random(shape, dtype=np.float32).astype(spec.obs_dtype)
    actions = rng.integers(0, spec.num_actions, (streams, per_stream)).astype(action_dtype(spec.num_actions))
    masks = None
    if spec.masked:  # three quarters of the actions valid, the taken one always
        valid = rng.random((streams, per_stream, spec.num_actions)) < 0.75
        np.put_along_axis(valid, actions.astype(np.intp)[..., None], True, axis=2)
        masks = np.packbits(valid, axis=-1, bitorder="little")
    rewards = rng.normal(size=(streams, per_stream)).astype(np.float32)
    first = np.zeros((streams, per_stream), bool)
    first[:, ::200] = True  # 200-step episodes
    terminated = np.roll(first, -1, axis=1)
    replay.add(0, frames, actions, rewards, terminated, first, masks=masks)
    return replay


def reset_compiler() -> None:
    """Forget every compiled graph of this process (Dynamo caches, CUDA-graph trees) before a new compiled learner.

    Dynamo keys its cache on the code object (``QNetwork.forward``), shared by every learner the benchmark builds:
    each one adds entries guarded on its own module instance, mode and shapes, and past
    ``torch._dynamo.config.recompile_limit`` (8) entries a further guard failure runs that frame eager (one log
    warning, no error), so a later variant would be timed uncompiled. Call it only when no earlier compiled learner
    is used again."""
    torch._dynamo.reset()


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
            if compiled:  # a fresh Dynamo state per compiled variant: see reset_compiler
                reset_compiler()
            dqn = DQNLearner(lc, cfg.env.stack, env_spec(cfg.env).num_actions, cfg.env.frame_size, device,
                             env_name=cfg.env.name, dueling=cfg.net.dueling, spec=env_spec(cfg.env))
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


# ----------------------------------------------------------------------------- whole system

class _Probe:
    """Resident memory of this process and the actors, and GPU utilization sampled every 0.5 s (CUDA only)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.gpu_samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_gpu, daemon=True)

    @staticmethod
    def rss_mb(procs: list) -> tuple[float, float]:
        """(this process, sum over live ``procs``) resident MB."""
        actors = 0.0
        for p in procs:
            try:
                actors += psutil.Process(p.pid).memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return psutil.Process().memory_info().rss / 2**20, actors / 2**20

    def _sample_gpu(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.gpu_samples.append(float(torch.cuda.utilization(self.device)))
            except Exception:  # no NVML (pynvml / nvidia-ml-py not installed): leave it unmeasured
                return

    def start(self) -> "_Probe":
        if self.device.type == "cuda":
            self._thread.start()
        return self

    def gpu_utilization(self) -> float | None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=2.0)
        return statistics.mean(self.gpu_samples) if self.gpu_samples else None


def _fill_replay(size_fn, drain_fn, target: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while size_fn() < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"replay reached only {size_fn()} of system_min_replay={target} in {timeout:.0f}s")
        drain_fn()


def _train_past_deadline(epochs_fn, run_fn, target: int, timeout: float = 300.0) -> None:
    """Call ``run_fn()`` (about a second of training each) until ``epochs_fn()`` reaches ``target``."""
    deadline = time.monotonic() + timeout
    while epochs_fn() < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {epochs_fn()} of system_min_epochs={target} epochs in {timeout:.0f}s")
        run_fn()


def _reports(report_queue, count: int) -> list[dict]:
    out = []
    for _ in range(count):
        try:
            out.append(report_queue.get(timeout=10.0))
        except Exception:  # an actor that did not report (killed): its figures are missing, not invented
            break
    return out


def _system_figures(*, transitions: int, updates: int, batch: int, elapsed: float, epoch_seconds: list[float],
                    handoff_seconds: float, lock_wait_seconds: float, collector_seconds: float, handoffs: int,
                    sent_transitions: int, drops: int, bytes_per_transition: int, rss_start: tuple,
                    rss_end: tuple, gpu: float | None, compile_seconds: float) -> dict:
    steady = epoch_seconds[1:] or epoch_seconds
    return {
        "experiences_per_s": transitions / elapsed,
        "batches_per_s": updates / elapsed,
        "samples_per_s": updates * batch / elapsed,
        "effective_batch": batch,
        "updates": updates,
        "epochs": len(epoch_seconds),
        "epoch_seconds": statistics.mean(steady) if steady else None,
        "first_epoch_ratio": (statistics.mean(steady) / epoch_seconds[0]) if len(epoch_seconds) > 1 else None,
        "gpu_utilization": gpu,
        "collector_blocked_fraction": handoff_seconds / max(collector_seconds, 1e-9),
        "collector_lock_wait_seconds": lock_wait_seconds,
        "collector_handoff_ms_per_1k_transitions": handoff_seconds * 1e6 / max(sent_transitions, 1),
        "collector_handoffs": handoffs,
        "collector_sent_transitions": sent_transitions,
        "drops": drops,
        "replay_bytes_per_transition": bytes_per_transition,
        "learner_rss_mb_start": rss_start[0], "learner_rss_mb_end": rss_end[0],
        "actors_rss_mb_start": rss_start[1], "actors_rss_mb_end": rss_end[1],
        "compile_seconds": compile_seconds,
        "seconds": elapsed,
    }


def system_optimized(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """warppipe as launch.local runs it: Learner (sockets, consolidation, AMP, compile, accumulation) + actors."""
    from learner.loop import Learner
    rc = RunConfig.from_json(cfg.to_json())
    rc.collect_only = False
    rc.learner = dataclasses.replace(
        rc.learner, micro_batch=bench.optimized_micro_batch, accum_steps=bench.optimized_accum,
        amp="auto" if device.type == "cuda" else "bf16", compile=True, broadcast_every=bench.optimized_sync_every,
        updates_per_epoch=bench.system_updates_per_epoch, samples_per_insert=0.0,
        min_replay=bench.system_min_replay, checkpoint_every=1 << 30)
    rc.validate()
    reset_compiler()  # the learner stage may have compiled QNetwork.forward in this process already
    with tempfile.TemporaryDirectory(prefix="warppipe-bench-") as run_dir:
        learner = Learner(rc, run_dir, device)
        learner.echo = lambda line: None
        compile_s = learner.compile()
        learner.start()
        ctx = spawn_context()
        stop, reports = ctx.Event(), ctx.Queue()
        procs = [start_process(ctx, actor_main, (rc, slot, stop, reports), f"actor-{slot}") for slot in range(rc.actors)]
        plane = learner.plane
        try:
            _fill_replay(lambda: len(plane.replay), lambda: plane.drain(timeout=0.05), rc.learner.min_replay, 300)
            rss_start, probe = _Probe.rss_mb(procs), _Probe(device).start()
            processed0, start = plane.processed, time.monotonic()
            learner.run(deadline=start + bench.system_seconds)
            _train_past_deadline(lambda: learner.counters.epoch, lambda: learner.run(deadline=time.monotonic() + 1),
                                 bench.system_min_epochs)
            elapsed, transitions = time.monotonic() - start, plane.processed - processed0
            rss_end, gpu = _Probe.rss_mb(procs), probe.gpu_utilization()
        finally:
            stop_processes(procs, stop)
            actor_reports = _reports(reports, len(procs))
            learner.close()
    epoch_seconds = ([rc.learner.updates_per_epoch / learner.first_epoch_rate] if learner.first_epoch_rate else []) \
        + [rc.learner.updates_per_epoch / r for r in learner.epoch_rates]
    return _system_figures(
        transitions=transitions, updates=learner.counters.updates, batch=learner.dqn.effective_batch,
        elapsed=elapsed, epoch_seconds=epoch_seconds,
        handoff_seconds=sum(r["submit_seconds"] for r in actor_reports), lock_wait_seconds=0.0,
        collector_seconds=sum(r["run_seconds"] for r in actor_reports),
        handoffs=sum(r["batches"] for r in actor_reports),
        sent_transitions=sum(r["sent_transitions"] for r in actor_reports),
        drops=plane.stats().drops + sum(r["dropped_batches"] for r in actor_reports),
        bytes_per_transition=plane.replay.bytes_per_transition, rss_start=rss_start, rss_end=rss_end, gpu=gpu,
        compile_seconds=compile_s)


def system_original(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """The seed's original pipeline (launch/original.py) with the same actors, env and window."""
    rc = RunConfig.from_json(cfg.to_json())
    rc.collect_only = False
    rc.learner = dataclasses.replace(rc.learner, updates_per_epoch=bench.system_updates_per_epoch)
    settings = bench.original
    ctx = spawn_context()
    stop, reports, lock = ctx.Event(), ctx.Queue(), ctx.Lock()
    shared_queue = ctx.Queue(maxsize=settings.queue_size)
    learner = OriginalLearner(rc, settings, shared_queue, device).start()
    procs = [start_process(ctx, original_collector_main, (rc, slot, stop, shared_queue, lock, settings.chunk_steps,
                                                          reports), f"collector-{slot}") for slot in range(rc.actors)]
    try:
        _fill_replay(lambda: len(learner.replay), lambda: time.sleep(0.05), bench.system_min_replay, 300)
        rss_start, probe = _Probe.rss_mb(procs), _Probe(device).start()
        processed0, start = learner.processed, time.monotonic()
        learner.run(bench.system_seconds)
        _train_past_deadline(lambda: len(learner.epoch_seconds), lambda: learner.run(1.0), bench.system_min_epochs)
        elapsed, transitions = time.monotonic() - start, learner.processed - processed0
        rss_end, gpu = _Probe.rss_mb(procs), probe.gpu_utilization()
    finally:
        stop_processes(procs, stop)
        actor_reports = _reports(reports, len(procs))
        learner.close()
    return _system_figures(
        transitions=transitions, updates=learner.updates, batch=settings.batch, elapsed=elapsed,
        epoch_seconds=learner.epoch_seconds,
        handoff_seconds=sum(r["blocked_seconds"] for r in actor_reports),
        lock_wait_seconds=sum(r["lock_wait_seconds"] for r in actor_reports),
        collector_seconds=sum(r["run_seconds"] for r in actor_reports),
        handoffs=sum(r["puts"] for r in actor_reports),
        sent_transitions=sum(r["steps"] for r in actor_reports), drops=0,
        bytes_per_transition=learner.replay.bytes_per_transition, rss_start=rss_start, rss_end=rss_end, gpu=gpu,
        compile_seconds=0.0)


def system_stage(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """Original, then optimized, same machine state; torch threads = the cores the actors leave free."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - cfg.actors))
    try:
        out = {"actors": cfg.actors, "envs_per_actor": cfg.actor.envs_per_actor, "device": str(device),
               "updates_per_epoch": bench.system_updates_per_epoch,
               "original_settings": dataclasses.asdict(bench.original),
               "optimized_settings": {"micro_batch": bench.optimized_micro_batch, "accum_steps": bench.optimized_accum,
                                      "sync_every": bench.optimized_sync_every, "batch_steps": cfg.actor.batch_steps}}
        out["original"] = system_original(cfg, device, bench)
        print(f"system original: {out['original']['experiences_per_s']:.1f} experiences/s, "
              f"{out['original']['batches_per_s']:.2f} batches/s", flush=True)
        out["optimized"] = system_optimized(cfg, device, bench)
        print(f"system optimized: {out['optimized']['experiences_per_s']:.1f} experiences/s, "
              f"{out['optimized']['batches_per_s']:.2f} batches/s", flush=True)
    finally:
        torch.set_num_threads(threads)
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
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "platform": platform.platform(), "libzmq": zmq.zmq_version(), "packages": _package_versions(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _package_versions() -> dict[str, str]:
    """Versions of the installed packages that matter here (absent ones are left out)."""
    out = {}
    for name in ("torch", "numpy", "pyzmq", "msgpack", "gym-super-mario-bros", "nes-py", "gym", "gymnasium",
                 "opencv-python-headless", "nvidia-ml-py"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def main(bench: BenchConfig) -> dict:
    unknown = sorted(set(bench.stages) - set(STAGES))
    if unknown:
        raise SystemExit(f"error: stages={unknown} unknown; choose from {list(STAGES)}")
    if bench.quick:
        apply_quick(bench)
    cfg = bench.run
    if bench.env:
        cfg.env.name = bench.env  # validate() below names a bad value and gives the auto fields this env's values
    cfg.actors = bench.actors
    cfg.collect_only = True
    cfg.validate()
    started = time.monotonic()
    result: dict = {"machine": machine()}
    print(f"machine: {result['machine']}", flush=True)
    stage_seconds: dict[str, float] = {}
    mark = [time.monotonic()]

    def lap(name: str) -> None:
        stage_seconds[name] = time.monotonic() - mark[0]
        mark[0] = time.monotonic()
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
                apex_cfg = RunConfig.from_json(cfg.to_json())
                apex_cfg.actor.eps_anneal_steps = 0  # the floors from the first step: inference runs as in late training
                collections.append(collection(apex_cfg, bench.seconds))
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
        lap("env_ceiling_and_collection")
    if "transport" in bench.stages:
        result["transport"] = transport(cfg, bench.transport_senders, bench.transport_batch, bench.transport_seconds)
        print(f"transport: {result['transport']['transitions_per_s']:,.0f} transitions/s, "
              f"{result['transport']['mb_per_s']:,.0f} MB/s", flush=True)
        lap("transport")
    if "replay" in bench.stages:
        result["replay"] = replay_stage(cfg)
        print(f"replay: {result['replay']}", flush=True)
        lap("replay")
    if "priority" in bench.stages:
        result["priority"] = priority_stage(cfg, bench.priority_capacities, bench.priority_batches)
        lap("priority")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "learner" in bench.stages:
        result["learner"] = learner_stage(cfg, device, bench.learner_updates, bench.learner_epochs)
        lap("learner")
    if "system" in bench.stages:
        result["system"] = system_stage(cfg, device, bench)
        lap("system")
    result["machine"]["benchmark_seconds"] = time.monotonic() - started
    result["machine"]["stage_seconds"] = stage_seconds
    result["machine"]["quick"] = bench.quick
    if bench.json:  # before rendering: the figures are kept whatever happens to the table
        with open(bench.json, "w") as fh:
            json.dump(result, fh, indent=2)
    print(render_table(result), flush=True)
    return result


def render_table(r: dict) -> str:
    rows = ["| figure | value |", "|---|---|"]
    if "env_ceiling" in r:
        first = r["env_ceiling"]["rounds"][0]
        rows.append(f"| env ceiling, {first['processes']} bare {first['env']} env processes | "
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
    text = "\n".join(rows) if len(rows) > 2 else ""
    if "priority" in r:
        text += "\n\n" + render_priority_table(r["priority"])
    if "system" in r:
        text += "\n\n" + render_system_table(r["system"])
    return text


def _num(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _change(original, optimized) -> str:
    if original is None or optimized is None or original == 0:
        return "n/a"
    return f"{optimized / original - 1:+.0%}"


def render_system_table(s: dict) -> str:
    """The seed's table (its five rows first) with measured Original, Optimized and Improvement columns."""
    o, p = s["original"], s["optimized"]
    os_, ps = s["original_settings"], s["optimized_settings"]
    rows = [f"Whole system, {s['actors']} actors x {s['envs_per_actor']} env(s), device {s['device']}; original: "
            f"one locked mp.Queue, batch {os_['batch']}, fp32, sync every {os_['sync_every']} epochs; optimized: "
            f"per-actor sockets, batch {ps['micro_batch']} x {ps['accum_steps']}, AMP, compile, sync every "
            f"{ps['sync_every']} epochs; epoch = {s['updates_per_epoch']} updates",
            "", "| Metric | Original | Optimized | Improvement |", "|---|---|---|---|"]

    def row(label, key, fmt, scale=1.0, suffix=""):
        a, b = (v if v is None or scale == 1.0 else v * scale for v in (o[key], p[key]))
        rows.append(f"| {label} | {_num(a, fmt)}{suffix if a is not None else ''} | "
                    f"{_num(b, fmt)}{suffix if b is not None else ''} | {_change(a, b)} |")

    row("Experience Rate", "experiences_per_s", ",.0f", suffix=" exp/s")
    row("Training Throughput", "batches_per_s", ".2f", suffix=" batch/s")
    row("GPU Utilization", "gpu_utilization", ".0f", suffix="%")
    row("Lock Wait Time (collector hand-off per 1k transitions)", "collector_handoff_ms_per_1k_transitions", ".2f",
        suffix=" ms")
    row("Epoch Time", "epoch_seconds", ".2f", suffix=" s")
    row("Samples trained", "samples_per_s", ",.0f", suffix=" samples/s")
    row("Collector time blocked or waiting", "collector_blocked_fraction", ".2f", scale=100, suffix="%")
    row("Drops (batches)", "drops", ",d")
    row("First epoch vs steady state", "first_epoch_ratio", ".0%")
    row("Replay bytes per transition", "replay_bytes_per_transition", ",d")
    row("Learner RSS at start", "learner_rss_mb_start", ",.0f", suffix=" MB")
    row("Learner RSS at end", "learner_rss_mb_end", ",.0f", suffix=" MB")
    row("Actors' RSS at end (all)", "actors_rss_mb_end", ",.0f", suffix=" MB")
    return "\n".join(rows)


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
