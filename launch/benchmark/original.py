"""The seed's *original* pipeline, kept only as the benchmark's baseline (never used to train).

Built from warppipe's own env, network, replay and update, so the comparison measures the pipeline, not the code:
collectors put small chunks into ONE shared queue under ONE shared lock (no staging, no drops), a processor thread
writes them into replay under a lock the trainer takes too; batch 256, fp32, no compile, sync every 3 epochs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from actors.collector import Collector
from actors.weights_client import WeightClient
from launch.processes import orphan_check
from learner.replay.frame_ring import FrameReplay
from learner.trainer import DQNLearner
from learner.weight_server import WeightServer
from shared.config import RunConfig
from shared.envs import env_spec
from shared.resolution import resolve_run


@dataclass
class OriginalSettings:
    """The seed's original configuration."""

    batch: int = 256
    """BATCH_SIZE: samples per update, fp32, no accumulation."""
    sync_every: int = 3
    """MODEL_UPDATE_FREQUENCY: epochs between weight broadcasts."""
    chunk_steps: int = 1
    """Ticks of a collector's envs per queue put (the seed's 'small chunks')."""
    queue_size: int = 10000
    """Chunks the shared queue holds before a put blocks."""


def original_collector_main(
    cfg: RunConfig, actor_id: int, stop_event: Any, shared_queue: Any, lock: Any, chunk_steps: int, report_queue: Any
) -> None:
    """Collector process: play, then ``with lock: shared_queue.put(chunk)``, timing the wait."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    collector = Collector(resolve_run(cfg, device="cpu"), actor_id, incarnation=actor_id)
    weights = WeightClient(cfg.transport, actor_id, actor_id, collector.net)
    current = weights.fetch(have=-1, timeout=cfg.actor.weights_timeout, should_stop=stop_event.is_set)
    if current is not None:
        collector.load_weights(*current)
    lock_wait = blocked = 0.0
    puts = 0  # also the next batch's seq
    started = time.perf_counter()
    orphaned = orphan_check()
    while not stop_event.is_set() and not orphaned():
        batch = collector.collect(chunk_steps, puts, weights.poll)
        t0 = time.perf_counter()
        with lock:
            t1 = time.perf_counter()
            while not stop_event.is_set() and not orphaned():
                with contextlib.suppress(queue.Full):
                    shared_queue.put((actor_id, batch.arrays), timeout=0.1)
                    break
        lock_wait += t1 - t0
        blocked += time.perf_counter() - t0
        puts += 1
    run, steps = time.perf_counter() - started, int(collector.stats["steps"])
    report = dict(actor=actor_id, puts=puts, lock_wait_seconds=lock_wait, blocked_seconds=blocked, run_seconds=run, steps=steps)
    report_queue.put(report)
    weights.close()
    collector.close()
    shared_queue.cancel_join_thread()  # exit even if the learner stopped reading


class OriginalLearner:
    """Processor thread (queue -> replay under a lock) plus an fp32 training loop; same counters as Learner."""

    def __init__(self, cfg: RunConfig, settings: OriginalSettings, shared_queue: Any, device: torch.device):
        self.cfg, self.settings, self.device = cfg, settings, device
        size, self.envs_per_actor = cfg.env.frame_size, cfg.actor.envs_per_actor
        streams = cfg.actors * self.envs_per_actor
        self.replay = FrameReplay(
            streams, cfg.replay.capacity, (size, size), cfg.env.stack, cfg.replay.n_step, cfg.replay.gamma, device
        )
        lc = dataclasses.replace(cfg.learner, micro_batch=settings.batch, accum_steps=1, amp="off", compile=False)
        self.dqn = DQNLearner(lc, env_spec(cfg.env), device)
        self.server = WeightServer(cfg.transport)
        self.queue, self.replay_lock = shared_queue, threading.Lock()
        self.processed = self.updates = self.weights_version = 0
        self.epoch_seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._process, name="experience-processor", daemon=True)

    def start(self) -> OriginalLearner:
        self.server.publish(0, self.dqn.online)
        self.server.start()
        self._thread.start()
        return self

    def _process(self) -> None:
        while not self._stop.is_set():
            try:
                actor, (frames, actions, rewards, terminated, first) = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            with self.replay_lock:
                self.replay.add(
                    actor * self.envs_per_actor, frames, actions, rewards, terminated.view(np.bool_), first.view(np.bool_)
                )
                self.processed += actions.size

    def run(self, seconds: float) -> None:
        """Train for ``seconds``: epochs of ``updates_per_epoch`` updates, a broadcast every ``sync_every``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.monotonic()
            for _ in range(self.cfg.learner.updates_per_epoch):
                with self.replay_lock:
                    batch = self.replay.sample(self.settings.batch)
                self.dqn.update(self.replay, batches=[batch])
                self.updates += 1
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.epoch_seconds.append(time.monotonic() - start)
            if len(self.epoch_seconds) % self.settings.sync_every == 0:
                self.weights_version += 1
                self.server.publish(self.weights_version, self.dqn.online)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.server.stop()
