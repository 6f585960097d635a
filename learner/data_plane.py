"""The learner's data plane: sockets -> consolidation thread -> consolidated queue -> replay.

``drain()`` moves queued batches into replay on the thread that also samples, the learner's loop.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import queue
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from learner.consolidator import Consolidator
from learner.replay.frame_ring import FrameReplay
from learner.replay.prioritized import PrioritizedReplay
from learner.staging import StagingQueue
from shared.config import RunConfig
from shared.spec import EnvSpec
from shared.wire import curve, protocol
from shared.wire.links import held_lag_allowance

# Decoded arrays are read-only views on received ZeroMQ frames; replay only reads them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


EPISODE_WINDOW = 100  # the behaviour-policy figures are means over the last this many finished episodes


@dataclass
class DataPlaneStats:
    """A snapshot for the console line and metrics."""

    processed: int  # transitions written into replay
    batches: int  # batches written into replay
    drops: int  # batches lost before reaching the learner (seq gaps)
    rejected: int  # messages rejected by validation
    buffer: int  # transitions currently held by replay
    queued: int  # batches waiting in the consolidated queue
    per_actor: list  # transitions accepted per actor slot
    lost_in_flight: int = 0  # transitions the actors handed to their sockets that never arrived (kept ledgers)


def make_replay(cfg: RunConfig, spec: EnvSpec, device: torch.device) -> FrameReplay:
    """The run's replay: a stream per actor env, prioritized or not."""
    r = cfg.replay
    kwargs: dict[str, Any] = dict(
        num_streams=cfg.actors * cfg.actor.envs_per_actor,
        frame_shape=tuple(spec.obs_shape),
        device=device,
        **{key: getattr(r, key) for key in ("capacity", "n_step", "gamma")},
        **{key: getattr(spec, key) for key in ("stack", "obs_dtype", "num_actions", "masked")},
    )
    if r.prioritized:
        schedule = functools.partial(r.beta_at, budget=cfg.total_env_steps)  # beta over the run's env steps
        return PrioritizedReplay(**kwargs, alpha=r.priority_alpha, eps=r.priority_eps, beta_schedule=schedule)
    return FrameReplay(**kwargs)


def weights_lag_limit(cfg: RunConfig) -> int:
    """The stale_weights limit in versions: ``learner.max_weights_lag``, plus, holding the ratio, what the held pipeline
    itself ages a batch (shared/wire/links.py ``held_lag_allowance``), which grows with the actors; 0: no limit."""
    lag, lc = cfg.learner.max_weights_lag, cfg.learner
    if lag == 0 or not lc.holds_ratio:
        return lag
    return lag + held_lag_allowance(cfg.actors, cfg.actor.envs_per_actor, cfg.actor.batch_steps, lc.broadcast_env_steps)


class DataPlane:
    def __init__(self, cfg: RunConfig, spec: EnvSpec, device: torch.device):
        self.cfg = cfg
        self.envs_per_actor = cfg.actor.envs_per_actor
        self.replay = make_replay(cfg, spec, device)
        # holding the ratio the pipeline stays full: a queue of one batch per actor keeps batches near the current weights
        held = min(cfg.transport.consolidated_queue, cfg.actors) if cfg.learner.holds_ratio else 0
        self.queue = StagingQueue(held or cfg.transport.consolidated_queue, cfg.transport.max_staged_bytes)
        # longer batches are refused at validation (reason "field"): written, they would raise on the training thread
        max_steps = min(cfg.transport.max_steps_per_message, cfg.actor.batch_steps, self.replay.stream_capacity)
        limits = protocol.Limits.for_spec(spec, max_envs=cfg.transport.max_env_per_message, max_steps=max_steps)
        # the largest message this run's actors send, so ZeroMQ holds at most recv_hwm of them per peer
        bound = limits.message_bound(self.envs_per_actor, max_steps)
        limits = dataclasses.replace(limits, max_message_bytes=min(cfg.transport.max_message_bytes, bound))
        self._release_auth = curve.start_authenticator(cfg.transport)  # the allow-list runs before any socket binds
        holds, steps = cfg.learner.holds_ratio, cfg.actor.batch_steps
        try:
            self.consolidator = Consolidator(
                cfg.transport, cfg.actors, self.envs_per_actor, limits, self.queue, held=holds, batch_steps=steps
            )
        except BaseException:
            self._release_auth()
            raise
        self.consolidator.max_weights_lag = weights_lag_limit(cfg)
        self.processed = self.batches = self.episodes_total = self.successes_total = 0
        # behaviour-policy episodes (return, score, success, start), newest last, across all actors: those that began at
        # the true start, and those that began at a saved state (actors/starts.py), apart
        self.episodes: collections.deque[list[float]] = collections.deque(maxlen=EPISODE_WINDOW)
        self.started: collections.deque[list[float]] = collections.deque(maxlen=EPISODE_WINDOW)
        self.start_counts = np.zeros(3, np.int64)  # episodes finished by where they started (the wire's start column)

    def start(self) -> DataPlane:
        self.consolidator.start()
        return self

    def drain(self, timeout: float = 0.0, max_batches: int = 1 << 30, max_transitions: int = 1 << 62) -> int:
        """Write the batches queued now into replay (at most ``max_batches``, none past the one reaching ``max_transitions``),
        waiting up to ``timeout`` s for a first; returns how many. Later ones wait: a drain keeps to its caller's clock."""
        written, limit, transitions = 0, min(max_batches, max(1, self.queue.qsize())), 0
        while written < limit and transitions < max_transitions:
            try:
                batch = self.queue.get(timeout=timeout) if written == 0 and timeout > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            terminated, first = (flag.view(np.bool_) for flag in (batch.terminated, batch.first))  # the wire's uint8 0/1
            stream0 = batch.actor * self.envs_per_actor
            self.replay.add(stream0, batch.frames, batch.actions, batch.rewards, terminated, first, batch.priorities, batch.masks)
            self.processed += batch.num_transitions
            transitions += batch.num_transitions
            self.batches += 1
            if len(batch.episodes):
                kinds = batch.episodes[:, 3].astype(np.int64)
                self.episodes.extend(batch.episodes[kinds == 0].tolist())
                self.started.extend(batch.episodes[kinds != 0].tolist())
                self.start_counts += np.bincount(kinds, minlength=3)
                self.episodes_total += len(batch.episodes)
                self.successes_total += int(batch.episodes[:, 2].sum())
            written += 1
        return written

    def drain_until_quiet(self, quiet: float, timeout: float) -> None:
        """Drain until nothing has arrived for ``quiet`` s (or ``timeout`` s pass): used after actors stop."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() - last < quiet and time.monotonic() < deadline:
            if self.drain(timeout=0.05):
                last = time.monotonic()

    def set_weights_version(self, version: int) -> None:
        """The learner's newly published weights version: batches too far behind it are rejected as stale."""
        self.consolidator.weights_version = int(version)

    def ledger(self):
        """Per (slot, incarnation) accounting (learner/consolidator.py IncarnationLedger), a copy."""
        return self.consolidator.ledger()

    def accepted_per_actor(self) -> list[int]:
        """Transitions accepted so far from each actor slot (counted as each message arrives, before ``drain``)."""
        return [t.accepted_transitions for t in self.consolidator.tracks]

    def stats(self) -> DataPlaneStats:
        c = self.consolidator
        return DataPlaneStats(
            processed=self.processed,
            batches=self.batches,
            drops=c.lost_batches,
            rejected=sum(c.rejects.values()),
            buffer=len(self.replay),
            queued=self.queue.qsize(),
            per_actor=self.accepted_per_actor(),
            lost_in_flight=sum(e.lost_transitions for e in c.ledger()),
        )

    def wait_for(self, transitions: int, timeout: float) -> bool:
        """Drain until ``processed`` reaches ``transitions`` or ``timeout`` s pass (used at shutdown and in tests)."""
        deadline = time.monotonic() + timeout
        while self.processed < transitions and time.monotonic() < deadline:
            self.drain(timeout=0.05)
        return self.processed >= transitions

    def close(self) -> None:
        self.consolidator.stop()
        if self.consolidator.ident is not None:  # started: its run() closes the sockets on the way out
            self.consolidator.join(timeout=5.0)
        else:
            for sock in self.consolidator.sockets:
                sock.close(linger=0)
        self._release_auth()
