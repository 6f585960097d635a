"""Stage system: the whole system twice, the seed's original pipeline and warppipe's, same actors, same seconds."""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import threading
import time
from typing import Any

import psutil
import torch

from actors.collector import actor_main
from launch.benchmark.config import BenchConfig
from launch.benchmark.learner import reset_compiler
from launch.benchmark.original import OriginalLearner, original_collector_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.trainer import resolve_amp
from shared.config import RunConfig
from shared.config_migration import read_config

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

    def start(self) -> _Probe:
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


def _system_figures(
    *,
    transitions: int,
    updates: int,
    batch: int,
    elapsed: float,
    epoch_seconds: list[float],
    handoff_seconds: float,
    lock_wait_seconds: float,
    collector_seconds: float,
    handoffs: int,
    sent_transitions: int,
    drops: int,
    bytes_per_transition: int,
    rss_start: tuple,
    rss_end: tuple,
    gpu: float | None,
    compile_seconds: float,
) -> dict:
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
        "learner_rss_mb_start": rss_start[0],
        "learner_rss_mb_end": rss_end[0],
        "actors_rss_mb_start": rss_start[1],
        "actors_rss_mb_end": rss_end[1],
        "compile_seconds": compile_seconds,
        "seconds": elapsed,
    }


def system_optimized(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """warppipe as launch.local runs it: Learner (sockets, consolidation, AMP, compile, accumulation) + actors."""
    from learner.loop import Learner
    from shared.resolution import resolve_run

    rc = read_config(cfg.to_json())
    rc.collect_only = False
    rc.learner = dataclasses.replace(
        rc.learner,
        micro_batch=bench.optimized_micro_batch,
        accum_steps=bench.optimized_accum,
        amp="auto",
        compile=True,
        broadcast_env_steps=bench.optimized_broadcast_env_steps,
        updates_per_epoch=bench.system_updates_per_epoch,
        samples_per_insert=0.0,
        min_replay=bench.system_min_replay,
        checkpoint_every=1 << 30,
        checkpoint_seconds=0.0,
    )
    rc.validate()
    reset_compiler()  # the learner stage may have compiled QNetwork.forward in this process already
    with tempfile.TemporaryDirectory(prefix="warppipe-bench-") as run_dir:
        learner = Learner(resolve_run(rc, device=str(device)), run_dir)
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
            _train_past_deadline(
                lambda: learner.counters.epoch, lambda: learner.run(deadline=time.monotonic() + 1), bench.system_min_epochs
            )
            elapsed, transitions = time.monotonic() - start, plane.processed - processed0
            rss_end, gpu = _Probe.rss_mb(procs), probe.gpu_utilization()
        finally:
            stop_processes(procs, stop)
            actor_reports = _reports(reports, len(procs))
            learner.close()
    rates = ([learner.clock.first_rate] if learner.clock.first_rate else []) + list(learner.clock.rates)
    epoch_seconds = [rc.learner.updates_per_epoch / r for r in rates]
    return _system_figures(
        transitions=transitions,
        updates=learner.counters.updates,
        batch=learner.dqn.effective_batch,
        elapsed=elapsed,
        epoch_seconds=epoch_seconds,
        handoff_seconds=sum(r["submit_seconds"] for r in actor_reports),
        lock_wait_seconds=0.0,
        collector_seconds=sum(r["run_seconds"] for r in actor_reports),
        handoffs=sum(r["batches"] for r in actor_reports),
        sent_transitions=sum(r["sent_transitions"] for r in actor_reports),
        drops=plane.stats().drops + sum(r["dropped_batches"] for r in actor_reports),
        bytes_per_transition=plane.replay.bytes_per_transition,
        rss_start=rss_start,
        rss_end=rss_end,
        gpu=gpu,
        compile_seconds=compile_s,
    )


def system_original(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """The seed's original pipeline (launch/benchmark/original.py) with the same actors, env and window."""
    rc = read_config(cfg.to_json())
    rc.collect_only = False
    rc.learner = dataclasses.replace(rc.learner, updates_per_epoch=bench.system_updates_per_epoch)
    settings = bench.original
    ctx = spawn_context()
    stop, reports, lock = ctx.Event(), ctx.Queue(), ctx.Lock()
    shared_queue = ctx.Queue(maxsize=settings.queue_size)
    learner = OriginalLearner(rc, settings, shared_queue, device).start()
    procs = [
        start_process(
            ctx, original_collector_main, (rc, slot, stop, shared_queue, lock, settings.chunk_steps, reports), f"collector-{slot}"
        )
        for slot in range(rc.actors)
    ]
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
        transitions=transitions,
        updates=learner.updates,
        batch=settings.batch,
        elapsed=elapsed,
        epoch_seconds=learner.epoch_seconds,
        handoff_seconds=sum(r["blocked_seconds"] for r in actor_reports),
        lock_wait_seconds=sum(r["lock_wait_seconds"] for r in actor_reports),
        collector_seconds=sum(r["run_seconds"] for r in actor_reports),
        handoffs=sum(r["puts"] for r in actor_reports),
        sent_transitions=sum(r["steps"] for r in actor_reports),
        drops=0,
        bytes_per_transition=learner.replay.bytes_per_transition,
        rss_start=rss_start,
        rss_end=rss_end,
        gpu=gpu,
        compile_seconds=0.0,
    )


def system_stage(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """Original, then optimized, same machine state; torch threads = the cores the actors leave free."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - cfg.actors))
    out: dict[str, Any]  # the settings, then "original" and "optimized": each stage's figures
    try:
        out = {
            "actors": cfg.actors,
            "envs_per_actor": cfg.actor.envs_per_actor,
            "device": str(device),
            "updates_per_epoch": bench.system_updates_per_epoch,
            "original_settings": dataclasses.asdict(bench.original),
            "optimized_settings": {
                "micro_batch": bench.optimized_micro_batch,
                "accum_steps": bench.optimized_accum,
                "broadcast_env_steps": bench.optimized_broadcast_env_steps,
                "batch_steps": cfg.actor.batch_steps,
                "amp": str(resolve_amp("auto", device)).removeprefix("torch."),
            },
        }
        out["original"] = system_original(cfg, device, bench)
        print(
            f"system original: {out['original']['experiences_per_s']:.1f} experiences/s, "
            f"{out['original']['batches_per_s']:.2f} batches/s",
            flush=True,
        )
        out["optimized"] = system_optimized(cfg, device, bench)
        print(
            f"system optimized: {out['optimized']['experiences_per_s']:.1f} experiences/s, "
            f"{out['optimized']['batches_per_s']:.2f} batches/s",
            flush=True,
        )
    finally:
        torch.set_num_threads(threads)
    return out
