"""Stage system: the whole system twice, the seed's original pipeline and warppipe's, same actors, same seconds."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import torch

from actors.collector import actor_main
from launch.benchmark.collection import exit_reports
from launch.benchmark.learner import reset_compiler
from launch.benchmark.options import BenchConfig
from launch.benchmark.original import OriginalLearner, original_collector_main
from launch.processes import spawn_context, start_process, stop_processes
from learner.trainer import resolve_amp
from shared.config import RunConfig
from shared.config_migration import read_config


def _rss_mb(procs: list) -> tuple[float, float]:
    """(this process, sum over live ``procs``) resident MB."""
    actors = 0.0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            actors += psutil.Process(p.pid).memory_info().rss
    return psutil.Process().memory_info().rss / 2**20, actors / 2**20


class _Window:
    """The timed window: its seconds and transitions, resident memory at its start and end, GPU utilization (CUDA only)."""

    def __init__(self, device: torch.device, procs: list, processed: Callable[[], int]):
        self.device, self.procs, self.processed = device, procs, processed
        self.gpu_samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_gpu, daemon=True)

    def _sample_gpu(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.gpu_samples.append(float(torch.cuda.utilization(self.device)))
            except Exception:  # no NVML (pynvml / nvidia-ml-py not installed): leave it unmeasured
                return

    def open(self) -> _Window:
        self.rss_start = _rss_mb(self.procs)
        if self.device.type == "cuda":
            self._thread.start()
        self.processed0, self.start = self.processed(), time.monotonic()
        return self

    def close(self) -> None:
        self.elapsed, self.transitions = time.monotonic() - self.start, self.processed() - self.processed0
        self.rss_end = _rss_mb(self.procs)
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=2.0)
        self.gpu = statistics.mean(self.gpu_samples) if self.gpu_samples else None


def _until(count: Callable[[], int], target: int, step: Callable[[], Any], error: str, timeout: float = 300.0) -> None:
    """Call ``step()`` until ``count()`` reaches ``target``; past ``timeout`` s raise ``error.format(count, target, timeout)``."""
    deadline = time.monotonic() + timeout
    while count() < target:
        if time.monotonic() > deadline:
            raise RuntimeError(error.format(count(), target, timeout))
        step()


FILL_ERROR = "replay reached only {} of system_min_replay={} in {:.0f}s"
EPOCHS_ERROR = "only {} of system_min_epochs={} epochs in {:.0f}s"


def _collector(reports: list[dict], handoff: str, lock_wait: str | None, handoffs: str, sent: str) -> dict[str, Any]:
    """The collectors' figures from their exit reports, summed under the keys each side's reports use (no lock: 0)."""
    handoff_seconds, sent_transitions = sum(r[handoff] for r in reports), sum(r[sent] for r in reports)
    return {
        "collector_blocked_fraction": handoff_seconds / max(sum(r["run_seconds"] for r in reports), 1e-9),
        "collector_lock_wait_seconds": sum(r[lock_wait] for r in reports) if lock_wait else 0.0,
        "collector_handoff_ms_per_1k_transitions": handoff_seconds * 1e6 / max(sent_transitions, 1),
        "collector_handoffs": sum(r[handoffs] for r in reports),
        "collector_sent_transitions": sent_transitions,
    }


def _system_figures(
    w: _Window, updates: int, batch: int, epoch_seconds: list[float], c: dict, drops: int, replay: Any, compile_s: float
) -> dict:
    steady = epoch_seconds[1:] or epoch_seconds
    return {
        "experiences_per_s": w.transitions / w.elapsed,
        "batches_per_s": updates / w.elapsed,
        "samples_per_s": updates * batch / w.elapsed,
        "effective_batch": batch,
        "updates": updates,
        "epochs": len(epoch_seconds),
        "epoch_seconds": statistics.mean(steady) if steady else None,
        "first_epoch_ratio": (statistics.mean(steady) / epoch_seconds[0]) if len(epoch_seconds) > 1 else None,
        "gpu_utilization": w.gpu,
        **c,  # the collectors' figures (_collector)
        "drops": drops,
        "replay_bytes_per_transition": replay.bytes_per_transition,
        "learner_rss_mb_start": w.rss_start[0],
        "learner_rss_mb_end": w.rss_end[0],
        "actors_rss_mb_start": w.rss_start[1],
        "actors_rss_mb_end": w.rss_end[1],
        "compile_seconds": compile_s,
        "seconds": w.elapsed,
    }


def system_optimized(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """warppipe as launch.local runs it: Learner (sockets, consolidation, the run's precision, compile, accumulation) + actors."""
    from learner.loop import Learner
    from shared.resolution import resolve_run

    rc = read_config(cfg.to_json())
    rc.learner = dataclasses.replace(
        rc.learner,
        micro_batch=bench.optimized_micro_batch,
        accum_steps=bench.optimized_accum,
        amp="auto",
        compile=True,
        broadcast_env_steps=bench.optimized_broadcast_env_steps,
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
        try:
            _until(lambda: learner.processor_stats().buffer, rc.learner.min_replay, lambda: learner.drain(0.05), FILL_ERROR)
            window = _Window(device, procs, lambda: learner.processor_stats().processed).open()
            learner.run(deadline=window.start + bench.system_seconds)
            _until(
                lambda: learner.summary().epoch, bench.system_min_epochs, lambda: learner.run(time.monotonic() + 1), EPOCHS_ERROR
            )
            window.close()
        finally:
            stop_processes(procs, stop)
            actor_reports = exit_reports(reports, len(procs))
            learner.close()
    rates = ([learner.clock.first_rate] if learner.clock.first_rate else []) + list(learner.clock.rates)
    epochs = [rc.learner.updates_per_epoch / r for r in rates]
    c = _collector(actor_reports, "submit_seconds", None, "batches", "sent_transitions")
    drops = learner.processor_stats().drops + sum(r["dropped_batches"] for r in actor_reports)
    lc = learner.header().cfg  # the learner settings as resolved here (auto batch sizes made concrete)
    batch = lc.micro_batch * lc.accum_steps
    return _system_figures(window, learner.summary().updates, batch, epochs, c, drops, learner.plane.replay, compile_s)


def system_original(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """The seed's original pipeline (launch/benchmark/original.py) with the same actors, env and window."""
    settings = bench.original
    ctx = spawn_context()
    stop, reports, lock = ctx.Event(), ctx.Queue(), ctx.Lock()
    shared_queue = ctx.Queue(maxsize=settings.queue_size)
    learner = OriginalLearner(cfg, settings, shared_queue, device).start()
    shared = (stop, shared_queue, lock, settings.chunk_steps, reports)  # every collector's arguments after (cfg, slot)
    procs = [start_process(ctx, original_collector_main, (cfg, slot, *shared), f"collector-{slot}") for slot in range(cfg.actors)]
    try:
        _until(lambda: len(learner.replay), bench.system_min_replay, lambda: time.sleep(0.05), FILL_ERROR)
        window = _Window(device, procs, lambda: learner.processed).open()
        learner.run(bench.system_seconds)
        _until(lambda: len(learner.epoch_seconds), bench.system_min_epochs, lambda: learner.run(1.0), EPOCHS_ERROR)
        window.close()
    finally:
        stop_processes(procs, stop)
        actor_reports = exit_reports(reports, len(procs))
        learner.close()
    c = _collector(actor_reports, "blocked_seconds", "lock_wait_seconds", "puts", "steps")
    return _system_figures(window, learner.updates, settings.batch, learner.epoch_seconds, c, 0, learner.replay, 0.0)


def system_stage(cfg: RunConfig, device: torch.device, bench: BenchConfig) -> dict:
    """Original, then optimized, same machine state; torch threads = the cores the actors leave free."""
    out: dict[str, Any] = {  # the settings, then "original" and "optimized": each stage's figures
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
    rc = read_config(cfg.to_json())  # both sides train, their epochs equally long
    rc.collect_only = False
    rc.learner = dataclasses.replace(rc.learner, updates_per_epoch=bench.system_updates_per_epoch)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - cfg.actors))
    try:
        for side, run in (("original", system_original), ("optimized", system_optimized)):
            f = out[side] = run(rc, device, bench)
            print(f"system {side}: {f['experiences_per_s']:.1f} experiences/s, {f['batches_per_s']:.2f} batches/s", flush=True)
    finally:
        torch.set_num_threads(threads)
    return out
