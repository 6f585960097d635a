"""The learner's main loop: drain experience, train within the replay ratio, publish, checkpoint.

One thread does it all, in this order, every iteration: move queued batches into replay; if
replay holds ``min_replay`` transitions and the replay-ratio limiter allows it (never more than
``samples_per_insert`` samples trained per transition inserted), do one update; every
``updates_per_epoch`` updates close an epoch (console line, metrics.jsonl, TensorBoard); every
``checkpoint_every`` epochs, and at exit, write a checkpoint. The target sync, the weight broadcast (a new
``weights_version``) and the network's resets follow periods in env steps
(learner/schedule.py), so the replay ratio and the batch never move them within the run. ``run`` returns why it ended
(``STOP_REASONS``): ``stop()`` was called, the deadline passed, ``learner.steps`` updates were made, or
``total_env_steps`` transitions were inserted (no drain writes a batch past the one that reaches that
budget, so a run ends within one batch of it). With ``learner.exact_ratio`` (opt-in) the loop also
stops moving batches into replay while training trails the ratio by more than ``ratio_slack``
transitions; the queue and the sockets fill and the actors wait at their socket (actors/sender.py),
so a slow learner slows collection instead of training less per env step. Without it, collectors are never
blocked: they stage and drop on their side. When no experience has
arrived for ``IDLE_NOTICE_EVERY`` seconds (every actor dead or restarting) the loop keeps waiting
and says so, at most once per ``IDLE_NOTICE_EVERY`` seconds.

Counters (``Counters``) are checkpointed and continue across ``--resume``; every published
``weights_version`` is also recorded in the run folder, and a resume starts one above the larger of
the two, so it stays strictly increasing for actors that never stopped.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import psutil
import torch

from learner.checkpoint import (
    best_score,
    discard_partial,
    load_best,
    load_checkpoint,
    load_snapshots,
    read_published,
    record_published,
    save_best,
    save_checkpoint,
    save_kept,
    save_snapshot,
    snapshot_path,
)
from learner.console import format_duration, format_epoch_line, format_eval_line, format_processor_line
from learner.data_plane import DataPlane
from learner.metrics import ROLLED_BACK_NAME, MetricsLog
from learner.probe import ProbeMonitor
from learner.schedule import EnvStepPeriod
from learner.supervised import check_alive
from learner.trainer import DQNLearner
from learner.weights import WeightServer
from shared.config import RunConfig
from shared.envs import entry_for, env_spec
from shared.exploration import mean_floor
from shared.probe import probe_set_cached
from shared.wire import protocol

IDLE_NOTICE_EVERY = 10.0  # seconds without new experience before the loop says it waits, and between such lines
COMPILERS = {"cpu": ("g++", "c++", "clang++"), "cuda": ("cc", "gcc", "clang")}  # torch.compile's: C++ on CPU, C for Triton
REBROADCAST_EVERY = 1.0  # seconds between repeats of the current weights while an actor is on another run's
RESET_STATISTICS_BATCHES = 8  # replay batches on which a reset re-estimates BatchNorm's statistics (512 frames at 64)

STOP_REASONS = ("stopped", "duration", "updates", "env_steps")
"""What ``Learner.run`` returns: ``stop()`` (a signal), the deadline, ``learner.steps``, ``total_env_steps``."""


def missing_compiler(device_type: str) -> str:
    """Why torch.compile cannot run on ``device_type`` here ('' if it can): it builds code at run time, C++ on CPU
    and Triton's C launcher on CUDA, and the runtime image carries no compiler."""
    if any(map(shutil.which, COMPILERS.get(device_type, COMPILERS["cuda"]))):
        return ""
    what = "a C++ compiler" if device_type == "cpu" else "a C compiler (for Triton)"
    return f"no compiler on PATH: torch.compile needs {what} on {device_type}, so the learner runs eager"


EPOCH_RATES_KEPT = 10_000  # the latest epochs' updates/s kept for the first-epoch ratio (bounded: runs last days)


@dataclass
class Counters:
    """Run counters; saved in every checkpoint and continued on resume."""

    epoch: int = 0
    updates: int = 0
    weights_version: int = 0
    run: int = 0  # the run's identity on the wire (shared/wire/protocol.py): drawn at its start, kept on resume
    samples_trained: int = 0
    inserted: int = 0  # transitions inserted into replay over the whole run (the env steps of metrics rows)
    wall_seconds: float = 0.0  # training time over the whole run
    elapsed_seconds: float = 0.0  # wall-clock time since the run started, resumes included (until the last checkpoint)


@dataclass
class EpochAccumulator:
    loss: float = 0.0
    td_error: float = 0.0
    q_mean: float = 0.0
    updates: int = 0
    started: float = 0.0
    processed_at_start: int = 0
    starved: float = 0.0  # seconds of loop turns that could not train: waiting for experience (the actors set the pace)
    holding: float = 0.0  # seconds of loop turns that held intake back for the ratio (the learner sets the pace)

    def add(self, stats) -> None:
        self.loss += stats.loss
        self.td_error += stats.td_error
        self.q_mean += stats.q_mean
        self.updates += 1


class Learner:
    """Owns the data plane, the DQN learner, the weight server, metrics and checkpoints."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: str,
        device: torch.device,
        resume_state: dict | None = None,
        stop_requested: threading.Event | None = None,
    ):
        """``stop_requested``: an event the caller may set before or during ``run`` (a launcher's signal handler,
        installed before the learner exists, so a Ctrl-C during start-up is not lost); ``stop()`` sets it."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.device = device
        self.train = not cfg.collect_only
        self.spec = env_spec(cfg.env)
        self.num_actions = self.spec.num_actions
        learner_cfg = cfg.learner.resolved(device.type)
        if not self.train:
            learner_cfg = dataclasses.replace(learner_cfg, compile=False)
        elif learner_cfg.compile and (why := missing_compiler(device.type)):
            print(f"[MAIN] {why}", flush=True)
            learner_cfg = dataclasses.replace(learner_cfg, compile=False)
        self.dqn = DQNLearner(learner_cfg, self.spec, device, env=cfg.env, dueling=cfg.net.dueling)
        self.counters = Counters()
        if resume_state is not None:
            self.dqn.load_state_dict(resume_state["learner"])
            self.counters = Counters(**resume_state["counters"])
            # above the checkpoint's and above anything published after it (actors that never stopped hold those)
            self.counters.weights_version = max(self.counters.weights_version, read_published(run_dir)) + 1
        if not self.counters.run:  # a new run (or a checkpoint from before run identities): actors take its weights
            self.counters.run = protocol.new_run_id()
        best = load_best(run_dir) if resume_state is not None else None
        self.best: tuple[float, float] | None = best_score(best["eval"]) if best and "eval" in best else None
        # (in-training score, weights_version) of the kept snapshots, best first (learner/checkpoint.py)
        self.snapshots: list[tuple[tuple[float, float], int]] = [
            (best_score(st["eval"]), int(st["counters"]["weights_version"]))
            for st in (load_snapshots(run_dir) if resume_state is not None else [])
        ]
        self.final_epsilon = mean_floor(cfg.actor, cfg.actors)  # the mean once annealing is over
        self.plane = DataPlane(cfg, self.num_actions, device, windows=self.dqn.rule.window)
        try:
            self.server = WeightServer(cfg.transport, slots=self.plane.consolidator.slots, run=self.counters.run)
            self.plane.consolidator.run_id = self.counters.run
        except BaseException:  # e.g. its ports held by another run: the experience sockets are let go too
            self.plane.close()
            raise
        resumed_at = self.counters.inserted if resume_state is not None else None
        self.metrics = MetricsLog(run_dir, resumed_at=resumed_at) if self.train else None
        if self.metrics is not None and self.metrics.rolled_back:
            print(
                f"[MAIN] {self.metrics.rolled_back} metrics rows past the checkpoint ({resumed_at:,} env steps) moved "
                f"to {ROLLED_BACK_NAME}: the training they describe was lost",
                flush=True,
            )
        self.stop_requested = stop_requested if stop_requested is not None else threading.Event()
        self.echo: Callable[[str], None] = lambda line: print(line, flush=True)  # the launcher routes it past its progress bar
        self._inserted_at_start = self.counters.inserted
        lc, start = self.dqn.cfg, self.counters.inserted
        self.target_period = EnvStepPeriod(lc.target_sync_env_steps, start)
        self.broadcast_period = EnvStepPeriod(lc.broadcast_env_steps, start)
        ev = cfg.eval
        self.keep_period = EnvStepPeriod(ev.keep_weights_env_steps if ev.keep_weights and self.train else 0, start)
        self.probe = self._probe_monitor() if self.train else None
        # no reset within one period of the budget: the last one has a whole period to recover (BBF's no_resets_after)
        self.reset_period = EnvStepPeriod(lc.reset_env_steps, start, cfg.total_env_steps, lc.reset_env_steps)
        self.resets = len(self.reset_period.multiples(start))  # those a resumed run already made
        self._elapsed_at_start = self.counters.elapsed_seconds
        self.checkpoint_failed = False  # the last periodic save failed: retry at the next epoch
        self._rebroadcast_at = 0.0  # when the weights were last sent again for actors on another run's
        self._started = time.monotonic()
        self.first_epoch_rate: float | None = None
        self.eta_origin: tuple[float, int] | None = None  # (monotonic time, env steps) at this start's first epoch
        self.epoch_rates: collections.deque[float] = collections.deque(maxlen=EPOCH_RATES_KEPT)  # updates/s after the first

    # ------------------------------------------------------------------ lifecycle

    def compile(self) -> float:
        """Compile and warm up on a synthetic batch before any actor starts (no drops while compiling)."""
        if not (self.train and self.dqn.cfg.compile):  # off, or no C++ compiler on a CPU (see __init__)
            return 0.0
        return self.dqn.warm_up(_SyntheticReplay(self.cfg, self.device, windows=self.dqn.rule.window))

    def start(self) -> Learner:
        self._started = time.monotonic()
        self._publish(self.counters.weights_version)
        self.server.start()
        self.plane.start()
        return self

    def stop(self) -> None:
        self.stop_requested.set()

    def close(self) -> None:
        """The last checkpoint (a failed write is said and leaves ``checkpoint_failed`` set), then the sockets."""
        if self.train and self.counters.updates > 0:
            self.checkpoint_or_say(last=True)
        self.server.stop()
        self.plane.close()
        if self.metrics is not None:
            self.metrics.close()

    # ------------------------------------------------------------------ the loop

    def stop_reason(self, deadline: float = 0.0) -> str:
        """Why the loop should end now (one of ``STOP_REASONS``), or '' while it should go on."""
        c, total = self.counters, self.cfg.total_env_steps
        if self.stop_requested.is_set():
            return "stopped"
        if deadline and time.monotonic() >= deadline:
            return "duration"
        if self.cfg.learner.steps and c.updates >= self.cfg.learner.steps:
            return "updates"
        if total and c.inserted >= total:
            return "env_steps"
        return ""

    def run(self, deadline: float = 0.0, on_tick: Callable[[], None] | None = None) -> str:
        """Loop until ``stop()``, the monotonic ``deadline`` (if > 0), ``learner.steps`` updates or
        ``total_env_steps`` transitions inserted; returns which (``STOP_REASONS``)."""
        cfg, c = self.cfg.learner, self.counters
        total = self.cfg.total_env_steps
        replay = self.plane.replay
        epoch = EpochAccumulator()
        last_tick = time.monotonic()
        heard = said = time.monotonic()  # when experience last arrived; when the loop last said it waits
        processed = self.plane.processed
        while not (reason := self.stop_reason(deadline)):
            turn = time.monotonic()
            trained = False
            if self.train and len(replay) >= cfg.min_replay and replay.num_sampleable() > 0 and self._ratio_allows():
                if epoch.updates == 0:  # an epoch's clock starts at its first update (not while replay fills)
                    epoch = EpochAccumulator(started=time.monotonic(), processed_at_start=self.plane.processed)
                self._schedule(c.inserted)
                epoch.add(self.dqn.update(replay))
                c.updates += 1
                c.samples_trained += self.dqn.effective_batch
                trained = True
                self._periodic(c.inserted)
                if epoch.updates == cfg.updates_per_epoch:
                    self._end_epoch(epoch)
                    epoch = EpochAccumulator()
            room = total - c.inserted if total else 1 << 62  # past the budget by at most the batch that reaches it
            allowed = self._ratio_room()  # exact_ratio: nothing until training catches up; the actors wait meanwhile
            holding = allowed <= 0
            self.plane.drain(timeout=0.0 if trained else 0.02, max_transitions=max(0, min(room, allowed)))
            c.inserted = self._inserted_at_start + self.plane.processed
            now = time.monotonic()
            if epoch.updates:  # the epoch's clock runs: say where this turn went
                epoch.starved += 0.0 if trained else now - turn
                epoch.holding += now - turn if holding else 0.0
            if self.plane.processed != processed or holding:  # holding back is not silence
                processed, heard = self.plane.processed, now
            elif now - heard >= IDLE_NOTICE_EVERY and now - said >= IDLE_NOTICE_EVERY:
                said = now  # every actor may be dead or restarting: say so, at most once per IDLE_NOTICE_EVERY
                self.echo(f"[MAIN] no experience from any actor for {now - heard:.0f}s; waiting")
            if time.monotonic() - last_tick >= 0.25:
                last_tick = time.monotonic()
                check_alive({"consolidation": self.plane.consolidator, "weight-server": self.server})
                self._call_over_other_runs()
                if on_tick is not None:
                    on_tick()
        return reason

    def _ratio_allows(self) -> bool:
        spi = self.cfg.learner.samples_per_insert
        return spi <= 0 or self.counters.samples_trained + self.dqn.effective_batch <= spi * self.counters.inserted

    def _ratio_room(self) -> int:
        """Transitions replay may take in now without training trailing samples_per_insert by more than ratio_slack
        (exact_ratio; the drain then overshoots by less than one batch). At most 0 only while the cap allows the
        next update, so holding never stalls the loop, and never before replay is ready to sample."""
        cfg, c, replay = self.cfg.learner, self.counters, self.plane.replay
        if not (self.train and cfg.holds_ratio and len(replay) >= cfg.min_replay and replay.num_sampleable() > 0):
            return 1 << 62
        return math.ceil(cfg.ratio_slack + (c.samples_trained + self.dqn.effective_batch) / cfg.samples_per_insert - c.inserted)

    def _call_over_other_runs(self) -> None:
        """While an actor's latest batch was played with another run's weights (this learner started over and the
        actor missed its broadcast), send the current weights again, at most every REBROADCAST_EVERY seconds."""
        now = time.monotonic()
        if now - self._rebroadcast_at >= REBROADCAST_EVERY and any(
            t.stats and t.run != self.counters.run for t in self.plane.consolidator.tracks
        ):
            self._rebroadcast_at = now
            self.server.rebroadcast()

    def _schedule(self, env_steps: int) -> None:
        """Set what the next update draws at ``env_steps``: the importance-sampling beta."""
        self.dqn.is_beta = self.cfg.replay.beta_at(env_steps, self.cfg.total_env_steps)

    def _periodic(self, env_steps: int) -> None:
        """What falls due at ``env_steps`` after an update: target sync, reset (then a sync), weight broadcast."""
        if self.reset_period.due(env_steps):
            self.reset_network()
        if self.target_period.due(env_steps):
            self.dqn.sync_target()
        if self.broadcast_period.due(env_steps):
            self.counters.weights_version += 1
            self._publish(self.counters.weights_version)

    def reset_network(self) -> None:
        """Reset the online net (learner/resets.py) on this run's replay frames, sync the target net to it, say so."""
        replay, batch = self.plane.replay, self.dqn.cfg.micro_batch
        frames = [replay.sample(batch)["obs"] for _ in range(RESET_STATISTICS_BATCHES)]
        counts = self.dqn.reset(frames)
        self.resets += 1
        self.echo(
            f"[MAIN] reset {self.resets} at {self.counters.inserted:,} env steps ({self.counters.updates:,} "
            f"updates): {counts['reinitialized']} head tensors re-initialized, {counts['shrunk']} others shrunk "
            f"to {self.dqn.cfg.reset_shrink:g} toward a fresh draw, BatchNorm statistics re-estimated on "
            f"{len(frames) * batch} replay frames"
        )

    def _end_epoch(self, acc: EpochAccumulator) -> None:
        cfg, c = self.cfg.learner, self.counters
        c.epoch += 1
        seconds = time.monotonic() - acc.started
        c.wall_seconds += seconds
        updates_per_s = acc.updates / seconds
        if self.first_epoch_rate is None:
            self.first_epoch_rate = updates_per_s
        else:
            self.epoch_rates.append(updates_per_s)
        figures = self.epoch_figures(acc, seconds)
        self.echo(format_epoch_line(c.epoch, figures, entry_for(self.cfg.env)) + self.budget_phrase())
        assert self.metrics is not None  # epochs end only when training, and a training loop opens the metrics log
        self.metrics.write(c.updates, c.inserted, self.elapsed(), figures)
        if c.epoch % cfg.checkpoint_every == 0 or self.checkpoint_failed:
            self.checkpoint_or_say()

    def budget_phrase(self) -> str:
        """``, Budget: N of M env steps, ETA 1h02m`` under --total-env-steps (the ETA at this start's env-step rate
        since its first epoch); empty without a budget."""
        total, now, done = self.cfg.total_env_steps, time.monotonic(), self.counters.inserted
        if not total:
            return ""
        if self.eta_origin is None:
            self.eta_origin = (now, done)
        since, at = self.eta_origin
        rate = (done - at) / (now - since) if now > since and done > at else 0.0
        eta = format_duration(max(total - done, 0) / rate) if rate > 0 else "-"
        return f", Budget: {done:,} of {total:,} env steps, ETA {eta}"

    def epoch_figures(self, acc: EpochAccumulator, seconds: float) -> dict[str, float]:
        tracks = self.plane.consolidator.tracks
        live = [t for t in tracks if t.stats]
        lags = [self.counters.weights_version - t.weights_version for t in live if t.run == self.counters.run]
        stats = self.plane.stats()
        window = np.asarray(self.plane.episodes, dtype=np.float64).reshape(-1, 3)  # return, score, success
        epsilon = statistics.mean(t.stats["epsilon"] for t in live) if live else 1.0
        return {
            "learner/loss": acc.loss / acc.updates,
            "learner/td_error": acc.td_error / acc.updates,
            "learner/q_mean": acc.q_mean / acc.updates,
            "learner/updates_per_s": acc.updates / seconds,
            "learner/samples_per_s": acc.updates * self.dqn.effective_batch / seconds,
            "learner/replay_ratio": self.counters.samples_trained / max(self.counters.inserted, 1),
            "learner/lr": self.dqn.optimizer.param_groups[0]["lr"],
            "learner/weights_version": self.counters.weights_version,
            "actor/other_run": sum(t.run != self.counters.run for t in live),
            "learner/resets": self.resets,
            "actor/experiences_per_s": (stats.processed - acc.processed_at_start) / seconds,
            "learner/starved_share": min(acc.starved / seconds, 1.0),
            "learner/holding_share": min(acc.holding / seconds, 1.0),
            "learner/updates": self.counters.updates,
            "actor/return": float(window[:, 0].mean()) if len(window) else 0.0,
            "actor/score": float(window[:, 1].mean()) if len(window) else 0.0,
            "actor/success_rate": float(window[:, 2].mean()) if len(window) else 0.0,
            "actor/episodes": self.plane.episodes_total,
            "actor/successes": self.plane.successes_total,
            "actor/epsilon": epsilon,
            "actor/weights_lag_max": max(lags) if lags else 0.0,
            "learner/rss_mb": psutil.Process().memory_info().rss / 2**20,  # this process: replay, nets, queue
            "replay/size": stats.buffer,
            "replay/live_streams": self.plane.replay.live_streams(),
            "replay/drops": stats.drops,
            "replay/rejected": stats.rejected,
            "replay/lost_in_flight": stats.lost_in_flight,
            **self.priority_figures(),
        }

    def priority_figures(self) -> dict[str, float]:
        """Prioritized replay's priority distribution and IS-weight range (empty for uniform replay)."""
        replay = self.plane.replay
        if not hasattr(replay, "priority_stats"):
            return {}
        s = replay.priority_stats()
        return {
            "replay/priority_mean": s["priority_mean"],
            "replay/priority_max": s["priority_max"],
            "replay/is_weight_min": s["weight_min"],
            "replay/is_weight_max": 1.0,
            "replay/is_beta": self.dqn.is_beta,
        }

    def _publish(self, version: int) -> None:
        record_published(self.run_dir, version)  # on disk before any actor can hold it: a resume goes above it
        self.server.publish(version, self.dqn.online)
        self.plane.set_weights_version(version)
        self._observe_broadcast(version)

    def _probe_monitor(self) -> ProbeMonitor | None:
        """The probe set's monitor (learner/probe.py), its states made once per run folder (probe.npz); None, said,
        where the env cannot be built here (a learner host without the emulator): training does not need it."""
        try:
            probe = probe_set_cached(self.run_dir, self.cfg.env)
        except Exception as exc:  # noqa: BLE001 - an instrument, never a reason to stop training
            print(f"[MAIN] no probe set: {type(exc).__name__}: {exc}; churn and action gaps are not logged", flush=True)
            return None
        return ProbeMonitor(probe.states, self.device, probe.masks)

    def _observe_broadcast(self, version: int) -> None:
        """What each broadcast leaves behind: the probe figures (churn since the last broadcast, action gaps) in
        metrics.jsonl and TensorBoard, and, every eval.keep_weights_env_steps, the weights in kept/ (the last
        eval.keep_weights stay: the final evaluation's late window)."""
        c = self.counters
        if self.probe is not None and self.metrics is not None:
            figures = self.probe.observe(self.dqn.online) | {"probe/weights_version": version}
            self.metrics.write(c.updates, c.inserted, self.elapsed(), figures)
        if self.keep_period.due(c.inserted):
            state = {
                "learner": {"online": self.dqn.online.state_dict()},
                "counters": {"weights_version": version, "inserted": c.inserted, "updates": c.updates},
            }
            try:
                save_kept(self.run_dir, state, self.cfg.eval.keep_weights)
            except (OSError, RuntimeError) as exc:  # a full disk costs the late window a member, not the run
                self.echo(f"[MAIN] kept weights v{version} not written ({type(exc).__name__}: {exc}); training goes on")

    def elapsed(self) -> float:
        """Wall-clock seconds since the run started, resumes included."""
        return self._elapsed_at_start + time.monotonic() - self._started

    def record_eval(self, result: dict) -> None:
        """Log an evaluation result (actors/evaluator.py ``eval_process_main``) against the env steps it was asked at."""
        state = result.pop("state", None)  # the evaluated weights, as numpy arrays
        s = result["summary"]
        figures = {
            "eval/score": s["score_mean"],
            "eval/score_median": s["score_median"],
            "eval/score_max": s["score_max"],
            "eval/success_rate": s["success_rate"],
            "eval/return": s["return_mean"],
            "eval/length": s["length_mean"],
            "eval/episodes": s["episodes"],
            "eval/epsilon": result["epsilon"],
            "eval/weights_version": result["weights_version"],
            "eval/seconds": result["seconds"],
        }
        if result.get("random") is not None:  # envs with random_reference: a random policy on the same seeds
            figures.update(
                {"eval/random_score": result["random"]["score_mean"], "eval/random_return": result["random"]["return_mean"]}
            )
        if self.metrics is not None:
            self.metrics.write(result["updates"], result["env_steps"], result["wall_seconds"], figures)
        self.echo(format_eval_line(result))
        if state is None or not self.train:
            return
        snapshot = {
            "learner": {"online": {k: torch.as_tensor(v) for k, v in state.items()}},  # no copy: ours already
            "counters": {
                "updates": result["updates"],
                "inserted": result["env_steps"],
                "weights_version": result["weights_version"],
                "wall_seconds": result["wall_seconds"],
            },
            "eval": {k: s[k] for k in ("score_mean", "score_median", "score_max", "success_rate", "return_mean", "episodes")}
            | {"epsilon": result["epsilon"]},
            "config": self.cfg.to_json(),
        }
        score, keep = best_score(s), self.cfg.eval.keep_snapshots
        version = result["weights_version"]
        kept = any(v == version for _, v in self.snapshots)  # the same weights evaluated twice: one file
        if keep and not kept and (len(self.snapshots) < keep or score > self.snapshots[-1][0]):  # end-of-run candidates
            save_snapshot(self.run_dir, snapshot)
            self.snapshots = sorted(self.snapshots + [(score, version)], reverse=True)
            for _, dropped in self.snapshots[keep:]:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(snapshot_path(self.run_dir, dropped))
            del self.snapshots[keep:]
        if self.best is None or score > self.best:
            self.best = score
            save_best(self.run_dir, snapshot)
            what = f"success {s['success_rate']:.0%}, score mean {s['score_mean']:,.2f}"
            self.echo(
                f"[MAIN] best evaluation so far ({what}): "
                f"weights v{result['weights_version']} saved to {os.path.join(self.run_dir, 'best.pt')}"
            )

    def checkpoint(self) -> str:
        self.counters.elapsed_seconds = self.elapsed()
        return save_checkpoint(
            self.run_dir,
            {
                "learner": self.dqn.state_dict(),
                "counters": dataclasses.asdict(self.counters),
                "config": self.cfg.to_json(),
            },
        )

    def checkpoint_or_say(self, last: bool = False) -> bool:
        """A checkpoint that a full or failing disk does not end: the error is printed, training goes on, and the
        next epoch tries again (the files on disk stay as they were); ``last``: the one at exit. Returns whether it
        was written."""
        try:
            self.checkpoint()
        except (OSError, RuntimeError) as exc:  # torch.save reports a failed write as RuntimeError
            self.checkpoint_failed = True
            then = "the run ends without it" if last else "training goes on and the next epoch tries again"
            self.echo(f"[MAIN] checkpoint at epoch {self.counters.epoch} failed ({type(exc).__name__}: {exc}); {then}")
            return False
        if self.checkpoint_failed:
            self.echo(f"[MAIN] checkpoint at epoch {self.counters.epoch} written after earlier failures")
        self.checkpoint_failed = False
        return True

    def processor_line(self, rate: float) -> str:
        return format_processor_line(self.plane.stats(), rate)

    def first_epoch_ratio(self) -> float | None:
        """First epoch's updates/s over the mean of the later epochs (None before two epochs)."""
        if self.first_epoch_rate is None or not self.epoch_rates:
            return None
        return self.first_epoch_rate / statistics.mean(self.epoch_rates)

    def actor_weights_versions(self) -> list[int]:
        """Per actor slot: the weights_version of its latest accepted batch (-1: nothing heard yet)."""
        return [t.weights_version if t.stats else -1 for t in self.plane.consolidator.tracks]

    def weights_lag(self) -> list[int]:
        """Per actor slot: versions behind the learner's current weights (-1: nothing heard yet, or its latest batch
        was played with another run's weights)."""
        return [
            self.counters.weights_version - t.weights_version if t.stats and t.run == self.counters.run else -1
            for t in self.plane.consolidator.tracks
        ]

    def slot_incarnations(self) -> list[int]:
        """Per actor slot: the incarnation whose batches are accepted (-1: none yet)."""
        return [t.incarnation for t in self.plane.consolidator.tracks]

    def release_slot(self, slot: int) -> None:
        """Free ``slot``'s lease (its actor died) so the restarted actor takes it at once."""
        self.plane.consolidator.slots.release(slot)


class _SyntheticReplay:
    """Stands in for replay during compile warm-up: right shapes and dtypes, random content; ``windows``: with the
    n-step window's fields, as the run's replay gives them (learner/replay/frames.py)."""

    def __init__(self, cfg: RunConfig, device: torch.device, windows: bool = False):
        self.cfg, self.device, self.windows = cfg, device, windows

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        spec, dev = env_spec(self.cfg.env), self.device
        shape = (batch, *spec.input_shape)
        if spec.obs_dtype == "uint8":
            obs = torch.randint(0, 256, shape, dtype=torch.uint8, device=dev)
        else:
            obs = torch.rand(shape, device=dev).to(getattr(torch, spec.obs_dtype))
        out = {
            "obs": obs,
            "next_obs": obs.clone(),
            "action": torch.randint(0, spec.num_actions, (batch,), device=dev),
            "reward": torch.zeros(batch, device=dev),
            "discount": torch.full((batch,), 0.99, device=dev),
        }
        n = self.cfg.replay.n_step
        if self.windows:
            window_obs = obs.unsqueeze(1).expand(batch, n - 1, *obs.shape[1:]).clone()
            window_action = torch.randint(0, spec.num_actions, (batch, n), device=dev)
            window_action[:, 0] = out["action"]
            weight = (self.cfg.replay.gamma ** torch.arange(n, device=dev, dtype=torch.float32)).expand(batch, n).clone()
            out |= {"window_obs": window_obs, "window_action": window_action, "window_weight": weight}
        if spec.masked:
            keys = ("mask", "next_mask", "window_mask") if self.windows else ("mask", "next_mask")
            for key in keys:
                shape = (batch, n - 1, spec.num_actions) if key == "window_mask" else (batch, spec.num_actions)
                out[key] = torch.rand(shape, device=dev) < 0.5
                out[key][..., 0] = True
            if self.windows:  # the taken actions are valid where they were taken
                out["mask"][torch.arange(batch, device=dev), out["action"]] = True
                valid = out["window_mask"]
                rows = torch.arange(batch, device=dev)[:, None]
                steps = torch.arange(n - 1, device=dev)[None, :]
                valid[rows, steps, window_action[:, 1:]] = True
        return out


def load_resume_state(run_dir: str) -> dict:
    """The run folder's last readable checkpoint (else the previous one, said), on the CPU; temporary files of a
    crashed save are removed.

    Loaded to the CPU whatever the learner's device: ``DQNLearner.load_state_dict`` copies the nets' tensors onto their
    parameters' device, and ``Optimizer.load_state_dict`` moves Adam's moments there too but keeps ``step`` where
    it was loaded unless the optimizer is fused or capturable (torch/optim/optimizer.py
    ``_process_value_according_to_param_policy``). Loaded onto a GPU, a non-fused Adam's ``step`` would be a CUDA
    tensor, and every update would read it back with ``.item()`` once per parameter."""
    for path in discard_partial(run_dir):
        print(f"[MAIN] removed {path}, left by a save that did not finish", flush=True)
    return load_checkpoint(run_dir, map_location="cpu", say=lambda line: print(line, flush=True), set_aside=True)
