"""The Learner: its loop (train within the replay ratio, drain experience, publish, checkpoint) and the face the launcher asks.

``step`` is one turn: when replay is ready and the replay-ratio limiter allows, one update, then queued batches move into
replay; every ``updates_per_epoch`` updates an epoch ends (learner/epoch.py) and a checkpoint starts when due. ``run``
repeats it, the housekeeping between turns. Target sync, broadcasts and resets follow periods in env steps
(learner/schedule.py). Holding the ratio (``learner.exact_ratio``), intake waits for training: a slow learner slows the actors.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from learner.broadcast_figures import BroadcastRecorder
from learner.checkpoint import Checkpointer, read_published, record_published
from learner.console import format_epoch_line, format_eval_line
from learner.data_plane import DataPlane, DataPlaneStats
from learner.epoch import Counters, EpochAccumulator, EpochClock, epoch_figures
from learner.metrics import MetricsLog
from learner.replay.saved import (
    PendingReplay,
    discard_stale_replay,
    replay_stamp,
    restore_replay,
    save_replay,
    write_replay,
)
from learner.schedule import EnvStepPeriod, ReplayRatio
from learner.slot_view import SlotView
from learner.snapshots import SnapshotKeeper, eval_figures
from learner.thread_watch import check_alive
from learner.trainer import DQNLearner
from learner.warm_up import SyntheticReplay, compile_setting
from learner.weight_server import WeightServer
from shared.config import LearnerConfig, TransportConfig
from shared.resolution import Resolved
from shared.wire import protocol
from shared.writes import RefusedWrites

IDLE_NOTICE_EVERY = 10.0  # seconds without new experience before the loop says it waits, and between such lines
REBROADCAST_EVERY = 1.0  # seconds between repeats of the current weights while an actor is on another run's

STOP_REASONS = ("stopped", "duration", "updates", "env_steps")  # Learner.run's: a stop, the deadline, steps, env steps


@dataclasses.dataclass(frozen=True)
class Header:
    """What the launcher's first lines say of the learner (``Learner.header``)."""

    cfg: LearnerConfig  # as this machine resolved it (compile off without a compiler)
    amp: str  # the autocast dtype, or 'off'
    vectors_pinned: bool  # compiled CPU code held to 256-bit vectors
    rule: str  # the TD rule in words
    label: str  # the env's name for its settings


@dataclasses.dataclass(frozen=True)
class Ending:
    """What ``Learner.shutdown`` leaves for the launcher's last lines."""

    ledger: list  # per (slot, incarnation): seqs accepted, rejected, duplicated, missing
    rejects: dict[str, int]  # rejected messages by reason
    versions: list[int]  # per slot: the weights version of its latest batch
    lags: list[int]  # per slot: versions behind the last weights
    first_epoch_ratio: float | None  # the first epoch's updates/s over the later ones'
    checkpoint_failed: bool  # the last checkpoint could not be written


class Learner:
    """Owns the data plane, the DQN learner, the weight server, metrics and checkpoints; callers ask it, not its parts."""

    def __init__(
        self,
        run: Resolved,
        run_dir: str,
        resume_state: dict | None = None,
        stop_requested: threading.Event | None = None,
        transport: TransportConfig | None = None,
    ):
        """``stop_requested``: an event the caller may set before or during ``run`` (a signal handler); ``stop()`` sets it.
        ``transport``: what the sockets bind with (None: the run's), e.g. the run's own keys, which checkpoints do not name."""
        self.cfg, self.run_dir, self.device, self.spec = run.cfg, run_dir, run.device, run.spec
        self.entry, self.train = run.entry, not run.cfg.collect_only
        learner_cfg = compile_setting(run.learner, self.train, run.device.type)
        self.dqn = DQNLearner(learner_cfg, self.spec, run.device, self.cfg.net)
        self.counters = c = Counters()
        if resume_state is not None:
            self.dqn.load_state_dict(resume_state["learner"])
            self.counters = c = Counters(**resume_state["counters"])
            # above the checkpoint's and above anything published after it (actors that never stopped hold those)
            c.weights_version = max(c.weights_version, read_published(run_dir)) + 1
        c.run = c.run or protocol.new_run_id()  # a new run (or one from before run identities): actors take its weights
        self.echo: Callable[[str], None] = lambda line: print(line, flush=True)  # the launcher routes it past its bar
        self.refused = RefusedWrites(lambda line: self.echo(line))  # what a full disk refused (shared/writes.py)
        self.snapshots = SnapshotKeeper(run_dir, self.cfg.eval.keep_snapshots, resume_state is not None, self.refused)
        transport = transport or self.cfg.transport
        self.plane = DataPlane(dataclasses.replace(self.cfg, transport=transport), self.spec, run.device)
        self.plane.queue.echo = lambda line: self.echo(line)  # the launcher's route past its progress bar
        try:
            self.server = WeightServer(transport, slots=self.plane.consolidator.slots, run=c.run)
            self.server.echo = lambda line: self.echo(line)
            self.plane.consolidator.run_id = c.run
        except BaseException:  # e.g. its ports held by another run: the experience sockets are let go too
            self.plane.close()
            raise
        self.slots = SlotView(self.plane.consolidator, c)
        self.stream_capacity = self.plane.replay.stream_capacity  # replay's transitions per env stream
        if resume_state is not None:  # the replay saved with the checkpoint resumed (not a previous one's)
            restore_replay(run_dir, self.plane.replay, replay_stamp(resume_state["counters"]), self.echo)
        resumed_at = c.inserted if resume_state is not None else None
        self.metrics = MetricsLog(run_dir, resumed_at=resumed_at, refused=self.refused) if self.train else None
        self.stop_requested = stop_requested if stop_requested is not None else threading.Event()
        lc, start = self.dqn.cfg, c.inserted
        self._inserted_at_start, self._elapsed_at_start = start, c.elapsed_seconds
        self.target_period = EnvStepPeriod(lc.target_sync_env_steps, start)
        self.broadcast_period = EnvStepPeriod(lc.broadcast_env_steps, start)
        self.broadcasts = BroadcastRecorder(run_dir, self.cfg, run.device, self.metrics, start, self.refused.echo)
        # no reset within one period of the budget: the last one has a whole period to recover (BBF's no_resets_after)
        self.reset_period = EnvStepPeriod(lc.reset_env_steps, start, self.cfg.total_env_steps, lc.reset_env_steps)
        self.resets = len(self.reset_period.multiples(start))  # those a resumed run already made
        self.ratio = ReplayRatio(lc, self.dqn.effective_batch, self.train)
        self.checkpoints = Checkpointer(
            run_dir, self._checkpoint_state, self.refused.echo, lc.checkpoint_every, lc.checkpoint_seconds
        )
        self._rebroadcast_at = 0.0  # when the weights were last sent again for actors on another run's
        self._checkpoints_started = 0  # at epoch ends, by this start: every replay_every-th saves the replay with it
        self._started = time.monotonic()
        self.clock = EpochClock()
        self._epoch, self._holding = EpochAccumulator(), False  # the open epoch; whether the last turn held intake back

    def compile(self) -> float:
        """Compile and warm up on a synthetic batch before any actor starts (no drops while compiling)."""
        if not (self.train and self.dqn.cfg.compile):  # off, or no C++ compiler on a CPU (see __init__)
            return 0.0
        return self.dqn.warm_up(SyntheticReplay(self.spec, self.device))

    def start(self) -> Learner:
        self._started = time.monotonic()
        self._publish(self.counters.weights_version)
        self.server.start()
        self.plane.start()
        return self

    def stop(self) -> None:
        self.stop_requested.set()

    def close(self, keep_replay: bool = False) -> None:
        """The last checkpoint, and with ``keep_replay`` (a stop before the budget) the replay saved with it; without, a
        saved replay of an earlier checkpoint is removed, as a resume of the last would not use it. Then the sockets."""
        if self.train and self.counters.updates > 0 and self.checkpoints.save_or_say(self.counters.epoch, last=True):
            stamp = self._replay_stamp()
            if keep_replay:
                self.refused.attempt("the replay", save_replay, self.run_dir, self.plane.replay, stamp)
            elif removed := discard_stale_replay(self.run_dir, stamp):
                self.echo(f"[MAIN] removed {removed}: saved with an earlier checkpoint, which a resume of the last does not use")
        self.server.stop()
        self.plane.close()
        if self.metrics is not None:
            self.metrics.close()

    def shutdown(self, keep_replay: bool) -> Ending:
        """Take in what is still in flight (the actors have stopped), then ``close``; what the last lines say."""
        plane, slots = self.plane, self.slots
        plane.drain_until_quiet(quiet=0.5, timeout=5.0)
        taken = plane.ledger(), dict(plane.consolidator.rejects), slots.weights_versions(), slots.weights_lag()
        self.close(keep_replay)
        return Ending(*taken, self.clock.first_epoch_ratio(), self.checkpoints.failed)

    def write_or_retry(self, name: str, write: Callable[[], object]) -> None:
        """``write()`` now; one a full disk refuses is said, and written before the next checkpoint."""
        if not self.refused.attempt(name, write):
            self.checkpoints.pending[name] = write

    def header(self) -> Header:
        """The learner's settings and mode for the launcher's header."""
        d, label = self.dqn, self.entry.label_of(self.cfg.env)
        return Header(d.cfg, f"{d.amp_dtype or 'off'}", d.cpu_vectors_pinned, d.rule.describe(), label)

    def summary(self) -> Counters:
        """A copy of the counters now: epoch, updates, env steps inserted, weights version, ..."""
        return dataclasses.replace(self.counters)

    def processor_stats(self) -> DataPlaneStats:
        """The data plane's figures now (the [PROCESSOR] line's)."""
        return self.plane.stats()

    def drain(self, timeout: float) -> int:
        """Move what the actors sent into replay, waiting up to ``timeout`` s for a first batch; returns how many."""
        return self.plane.drain(timeout=timeout)

    def incarnations(self) -> list[int]:
        """The incarnation whose batches each actor slot accepts (-1: none yet)."""
        return self.slots.incarnations()

    def release_slot(self, slot: int) -> None:
        """Free ``slot``'s lease (its actor died) so the restarted actor takes it at once."""
        self.slots.release(slot)

    def current_weights(self) -> tuple[int, dict] | None:
        """The last published (version, arrays), None before the first publish."""
        return self.server.current()

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

    def step(self) -> bool:
        """One turn: an update if replay is ready and the ratio allows (an epoch ends every ``updates_per_epoch``), then
        intake within the ratio and the budget; whether it trained. ``run`` loops it."""
        cfg, c, total, replay = self.cfg.learner, self.counters, self.cfg.total_env_steps, self.plane.replay
        turn = time.monotonic()
        ready = self.train and len(replay) >= cfg.min_replay and replay.num_sampleable() > 0
        if trained := ready and self.ratio.allows(c.samples_trained, c.inserted):
            if self._epoch.updates == 0:  # an epoch's clock starts at its first update (not while replay fills)
                self._epoch = EpochAccumulator(started=time.monotonic(), processed_at_start=self.plane.processed)
            replay.anneal(c.inserted)  # prioritized replay's beta
            self._epoch.add(self.dqn.update(replay))
            c.updates += 1
            c.samples_trained += self.dqn.effective_batch
            self._periodic(c.inserted)
            if self._epoch.updates == cfg.updates_per_epoch:
                self._end_epoch(self._epoch)
                self._epoch = EpochAccumulator()
        room = total - c.inserted if total else 1 << 62  # past the budget by at most the batch that reaches it
        allowed = self.ratio.room(c.samples_trained, c.inserted, ready)  # held: the actors wait meanwhile
        self._holding = allowed <= 0
        self.plane.drain(timeout=0.0 if trained else 0.02, max_transitions=max(0, min(room, allowed)))
        c.inserted = self._inserted_at_start + self.plane.processed
        if self._epoch.updates:  # the epoch's clock runs: say where this turn went
            spent = time.monotonic() - turn
            self._epoch.starved += 0.0 if trained else spent
            self._epoch.holding += spent if self._holding else 0.0
        return trained

    def run(self, deadline: float = 0.0, on_tick: Callable[[], None] | None = None) -> str:
        """``step`` until a stop, the monotonic ``deadline`` (if > 0), ``learner.steps`` updates or the budget; returns which.
        Between turns: the idle notice; every 0.25 s the service threads' liveness, a rebroadcast, ``on_tick``."""
        self._epoch = EpochAccumulator()  # an epoch an earlier ``run`` left open starts over
        last_tick = heard = said = time.monotonic()  # heard: when experience last arrived; said: the last wait notice
        processed = self.plane.processed
        while not (reason := self.stop_reason(deadline)):
            self.step()
            now = time.monotonic()
            if self.plane.processed != processed or self._holding:  # holding back is not silence
                processed, heard = self.plane.processed, now
            elif now - heard >= IDLE_NOTICE_EVERY and now - said >= IDLE_NOTICE_EVERY:
                said = now  # every actor may be dead or restarting: say so, at most once per IDLE_NOTICE_EVERY
                self.echo(f"[MAIN] no experience from any actor for {now - heard:.0f}s; waiting")
            if now - last_tick >= 0.25:
                last_tick = now
                check_alive({"consolidation": self.plane.consolidator, "weight-server": self.server})
                if self.slots.any_on_other_run() and now - self._rebroadcast_at >= REBROADCAST_EVERY:
                    self._rebroadcast_at = now  # send the current weights again to actors that missed the broadcast
                    self.server.rebroadcast()
                if on_tick is not None:
                    on_tick()
        return reason

    def _periodic(self, env_steps: int) -> None:
        """What falls due at ``env_steps`` after an update: target sync, reset (then a sync), weight broadcast."""
        if self.reset_period.due(env_steps):
            self.reset_network()
        if self.target_period.due(env_steps):
            self.dqn.sync_target()
        if self.broadcast_period.due(env_steps):
            version = self._next_version()
            self._publish(version)
            self.counters.weights_version = version

    def reset_network(self) -> None:
        """Reset the online net on this run's replay frames (``DQNLearner.reset``), sync the target to it, say so."""
        n, c = self.dqn.reset(self.plane.replay), self.counters
        self.resets += 1
        self.echo(
            f"[MAIN] reset {self.resets} at {c.inserted:,} env steps ({c.updates:,} updates): {n['reinitialized']} head "
            f"tensors re-initialized, {n['shrunk']} others shrunk to {self.dqn.cfg.reset_shrink:g} toward a fresh draw, "
            f"BatchNorm statistics re-estimated on {n['frames']} replay frames"
        )

    def _end_epoch(self, acc: EpochAccumulator) -> None:
        c = self.counters
        c.epoch += 1
        seconds = time.monotonic() - acc.started
        c.wall_seconds += seconds
        self.clock.record(acc.updates / seconds)
        figures = epoch_figures(acc, seconds, c, self.plane, self.dqn, self.resets)
        self.echo(
            format_epoch_line(c.epoch, figures, self.entry) + self.clock.budget_phrase(self.cfg.total_env_steps, c.inserted)
        )
        assert self.metrics is not None  # epochs end only when training, and a training loop opens the metrics log
        self.metrics.write(c.updates, c.inserted, self.elapsed(), figures)
        self.checkpoints.poll()
        if self.checkpoints.due(c.epoch):
            self.checkpoints.start(c.epoch, self._replay_with_checkpoint())

    def _replay_with_checkpoint(self) -> Callable[[bool], None] | None:
        """At every ``replay_every``-th checkpoint of this start: the replay written now, as the counters the checkpoint takes
        stand, and what its thread does once that checkpoint is over: put the replay in place, or drop it with a failed one.
        None with a checkpoint tried again after a failure (each epoch: the replay waits for the next regular one)."""
        self._checkpoints_started += 1
        every = self.dqn.cfg.replay_every
        if not every or self._checkpoints_started % every or self.checkpoints.failed:
            return None
        written: list[PendingReplay] = []

        def write() -> None:
            written.append(write_replay(self.run_dir, self.plane.replay, self._replay_stamp()))

        if not self.refused.attempt("the replay", write):  # a full disk: said, the temporary folder gone
            return None

        def then(checkpoint_written: bool) -> None:
            if checkpoint_written:
                self.refused.attempt("the replay", written[0].commit)
            else:
                written[0].discard()  # it belongs to a checkpoint that is not on disk

        return then

    def _replay_stamp(self) -> dict[str, int]:
        """The stamp of a replay saved now: the counters a checkpoint taken now holds."""
        return replay_stamp(dataclasses.asdict(self.counters))

    def _publish(self, version: int) -> None:
        """Broadcast the weights as ``version``, noted on disk first (a resume starts above it), whether or not the disk
        took the note."""
        # The note is overwritten in place, so a full disk does not refuse it; where it still fails (its file never
        # made, a copy-on-write filesystem) the weights go out anyway: actors must not play old weights for as long as
        # the disk is full. The cost: a crash before the next noted version (or checkpoint) resumes at or below versions
        # actors already hold, and they take only newer ones; _next_version jumps above those once their batches come.
        self.refused.attempt("the weights version record", record_published, self.run_dir, version)
        self.server.publish(version, self.dqn.online, self.counters.inserted)
        self.plane.set_weights_version(version)
        c = self.counters
        self.broadcasts.record(version, self.dqn.online, c.updates, c.inserted, self.elapsed())

    def _next_version(self) -> int:
        """The version of the next broadcast: above the current one, and above any of this run's versions an actor's
        latest batch was played with (published before a crash whose record the disk refused: ``_publish``)."""
        c, held = self.counters, self.slots.newest_version()
        if held > c.weights_version:
            self.echo(
                f"[MAIN] actors play weights v{held} of this run, above v{c.weights_version}: a version published before "
                f"a restart was not on record; broadcasting v{held + 1} so that they take it"
            )
        return max(c.weights_version, held) + 1

    def elapsed(self) -> float:
        """Wall-clock seconds since the run started, resumes included."""
        return self._elapsed_at_start + time.monotonic() - self._started

    def record_eval(self, result: dict) -> None:
        """Log an evaluation result against the env steps it was asked at; its weights may become a snapshot or best.pt."""
        state = result.pop("state", None)  # the evaluated weights, as numpy arrays
        if self.metrics is not None:
            self.metrics.write(result["updates"], result["env_steps"], result["wall_seconds"], eval_figures(result))
        self.echo(format_eval_line(result))
        if state is not None and self.train:
            self.snapshots.consider(result, state, self.cfg.to_json())

    def _checkpoint_state(self) -> dict:
        self.counters.elapsed_seconds = self.elapsed()
        return {"learner": self.dqn.state_dict(), "counters": dataclasses.asdict(self.counters), "config": self.cfg.to_json()}
