"""Run warppipe on one machine: the learner in this process, N actor processes beside it.

    python -m launch.local --actors 4                      # train Mario 1-1 to its 300K env-step budget
    python -m launch.local --actors 4 --total-env-steps 200000  # ... until 200K env steps are in replay
    python -m launch.local --actors 4 --learner.steps 5000  # ... until 5,000 updates
    python -m launch.local --actors 4 --duration 300       # ... for 5 minutes of wall-clock
    python -m launch.local --actors 4 --seed 7             # repeat run seed 7 (default: a fresh seed, printed)
    python -m launch.local --actors 2 --collect-only       # the data plane alone
    python -m launch.local --resume runs/20261121-...      # continue a run from its folder
    python -m launch.local --resume latest                 # ... the newest run under --run-dir (or a new one)
    python -m launch.local --actors 2 --no-spawn-actors    # learner only (= launch.learner); actors: launch.actor
    python -m launch.local --config runs/20261121-.../config.json --seed 8  # a new run on a saved run's settings
    python -m launch.local --actors 8 --print-config      # print every value the run would use (JSON); start nothing

Prints a ``[PROCESSOR]`` line every ``--log-every`` seconds, a ``[MAIN] Epoch`` line per epoch and a ``[MAIN] Eval``
line per evaluation (a progress bar only on a terminal); restarts an actor that dies. On Ctrl-C, SIGTERM or the end of
a budget it writes the final checkpoint, stops every child, plays the final evaluation (launch/final_eval.py), says
what ended the run and exits 0. The budgets count the whole run, resumes included; ``--resume`` keeps them unless the
command line sets new ones. ``--config RUN`` (a run folder or its config.json) starts a new run on that run's settings
and seed, the options given overriding them (launch/saved_config.py); ``--print-config`` prints the resolved values
as JSON, no auto left, and exits 0 without a socket or a run folder (launch/resolved_config.py).

Spawning its actors on loopback without ``--transport.curve-*`` keys, the sockets use CURVE with keys made for the run
in ``RUN/keys`` (launch/keys.py ``run_transport``; ``--transport.open-loopback``: plain TCP), so no other local user can
take a slot, fetch the weights or fill the replay; ``--no-spawn-actors`` on loopback without keys stays open, with a
warning.

Exit codes: 0 the run ended as asked; 1 an error, or the last checkpoint could not be written (the newest one that was
is kept); 2 a bad option, or the run folder held by another learner; 3 the same error ended the last starts from this
checkpoint (launch/failures.py); 5 the training is saved but some final-evaluation results could not be written (a full
disk: ``python -m launch.final_eval RUN`` writes them later). With ``WARPPIPE_HEALTH_FILE`` set, a thread of its own
keeps the liveness file fresh for the container health check from start to exit (shared/heartbeat.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection
from typing import Any

import torch
from tqdm import tqdm

from actors.collector import actor_main
from actors.eval_actor import eval_process_main
from launch.cli import parse_launch
from launch.exits import EXIT_UNWRITTEN, StopSignals, exit_code
from launch.failures import (
    EXIT_REPEATED,
    REPEATS_TO_STOP,
    checkpoint_stamp,
    clear_failures,
    error_line,
    record_failure,
    repeated_line,
)
from launch.final_eval import VIDEO_NAME, final_evaluation, result_writes, unwritten_line
from launch.keys import run_transport
from launch.machine import record_machine
from launch.processes import (
    BACKOFF_CAP_S,
    QUICK_EXIT_S,
    ActorPool,
    backoff_delay,
    spawn_context,
    start_process,
    stop_processes,
)
from launch.resolved_config import print_config
from launch.resume import finished_line, resolved_start
from launch.run_lock import RunFolderLock
from learner.checkpoint import BEST_NAME, CHECKPOINT_NAME
from learner.console import format_processor_line
from learner.data_plane import weights_lag_limit
from learner.loop import Learner
from learner.replay.saved import REPLAY_NAME
from learner.schedule import EnvStepPeriod
from shared.config import RunConfig
from shared.cpus import learner_threads
from shared.envs import EnvEntry
from shared.errors import ConfigError
from shared.evaluation.result import RESULT_NAME
from shared.exploration import anneal_steps_per_env, epsilon_floors
from shared.heartbeat import Heartbeat
from shared.network import network_family
from shared.resolution import Resolved
from shared.spec import EnvSpec
from shared.writes import write_atomic

say = functools.partial(print, flush=True)  # the launcher's lines, read as they come (logs, tests)
SILENT_SLOT_NOTICE = 60.0  # seconds after start when a slot that has sent nothing is reported (its replay share is idle)

# What a run leaves for its user, said at the end: weights, final figures, the video, the curves, a stopped run's replay.
RUN_RESULTS = (
    *(CHECKPOINT_NAME, BEST_NAME, RESULT_NAME, VIDEO_NAME, "metrics.jsonl", "config.json", "kept/", "probe.npz"),
    REPLAY_NAME,
)


def spec_line(cfg: RunConfig, entry: EnvEntry, spec: EnvSpec) -> str:
    """The env's spec in a few words: observation, stack, actions, mask, network family, the env's own options."""
    options = entry.options
    return (
        f"obs {spec.obs_dtype} {'x'.join(map(str, spec.obs_shape))}, stack {spec.stack}, "
        f"{spec.num_actions} actions{', masked' if spec.masked else ''}, {network_family(spec)} net"
        + (f", {options(cfg.env)}" if options is not None else "")
    )


def progress_budget(cfg: RunConfig) -> tuple[str, int] | None:
    """The budget the progress bar follows (unit, total): env steps, else updates, else seconds; None: none set."""
    if cfg.total_env_steps:
        return "env steps", cfg.total_env_steps
    if cfg.learner.steps and not cfg.collect_only:
        return "updates", cfg.learner.steps
    return ("s", int(cfg.duration)) if cfg.duration > 0 else None


def stop_line(reason: str, cfg: RunConfig, inserted: int, updates: int) -> str:
    """What ended the run, with the figure the budget counts (the launcher's last line)."""
    if reason == "env_steps":
        return f"env-step budget: {inserted:,} of --total-env-steps {cfg.total_env_steps:,} env steps inserted"
    if reason == "updates":
        return f"update budget: {updates:,} of --learner.steps {cfg.learner.steps:,} updates"
    return f"--duration {cfg.duration:g}s reached" if reason == "duration" else "a stop signal (Ctrl-C or SIGTERM)"


def bound_ports(cfg: RunConfig) -> range:
    """The learner's bound ports: requests, weights, then one experience port per actor slot."""
    return range(cfg.transport.base_port - 2, cfg.transport.base_port + cfg.actors)


def run(cfg: RunConfig, signals: StopSignals | None = None, given: Collection[str] | None = None) -> int:
    """The run ``cfg`` asks for, to its end; ``signals``: the program's, installed at its start (else here), so a stop
    during start-up is neither ignored nor raised through half-built sockets; ``given``: the options its command line
    gave (launch.cli.given_options), which a resume takes where it may change them."""
    signals = signals or StopSignals().install()
    # liveness for the container health check from a thread of its own: loading, compiling, saving and the final
    # evaluation go without training ticks for minutes
    heartbeat = Heartbeat("learner", phase="starting").start()
    try:
        return _run(cfg, signals, given, heartbeat)
    finally:
        heartbeat.stop()


def _run(cfg: RunConfig, signals: StopSignals, given: Collection[str] | None, heartbeat: Heartbeat) -> int:
    ready, resume_state = resolved_start(cfg, given)
    cfg = ready.cfg
    run_dir = cfg.resume or os.path.join(cfg.run_dir, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    os.makedirs(run_dir, exist_ok=True)
    lock = RunFolderLock(run_dir).acquire()  # one learner per run folder: a second one here exits 2
    stamp = checkpoint_stamp(resume_state)
    try:
        if finished := finished_line(cfg, resume_state, run_dir):  # a restarted learner of a finished run stops here
            say(finished)
            return 0
        if repeated := repeated_line(run_dir, stamp):  # this checkpoint's last starts all failed alike
            say(repeated, file=sys.stderr)
            return EXIT_REPEATED
        try:
            code = _train(ready, resume_state, run_dir, signals, heartbeat)
        except ConfigError:
            raise
        except Exception as exc:  # counted per checkpoint: a failure restarting cannot cure ends the loop
            if record_failure(run_dir, stamp, error_line(exc)) < REPEATS_TO_STOP:
                raise
            traceback.print_exc()
            say(repeated_line(run_dir, stamp), file=sys.stderr)
            return EXIT_REPEATED
        if code in (0, EXIT_UNWRITTEN):  # it trained to its end
            clear_failures(run_dir)
        return code
    finally:
        lock.release()


def _train(ready: Resolved, resume_state: Any, run_dir: str, signals: StopSignals, heartbeat: Heartbeat) -> int:
    """Train in ``run_dir`` to the run's end, then its final evaluation; the exit code. ``heartbeat`` names each phase."""
    cfg, stopping, terminated = ready.cfg, signals.stopping, signals.terminated
    threads = learner_threads(cfg.learner.threads, cfg.actors if cfg.spawn_actors else 0)  # launch.learner: none local
    torch.set_num_threads(threads)
    transport, guard = run_transport(cfg, run_dir)  # the run's own keys (RUN/keys), never named in config.json
    learner = Learner(ready, run_dir, resume_state, stop_requested=stopping, transport=transport)
    for name, write in {  # a full disk: said, and written before the next checkpoint instead
        # the configuration of the run's latest start, on resume too: a next resume keeps the budgets set now
        "config.json": lambda: write_atomic(os.path.join(run_dir, "config.json"), cfg.to_json()),
        "machine.json": lambda: record_machine(run_dir),  # the machine the run's figures came from
    }.items():
        learner.write_or_retry(name, write)
    print_header(cfg, learner, run_dir, threads, resumed=resume_state is not None)
    if guard:
        say(guard)
    compile_seconds = learner.compile()
    if compile_seconds:
        say(f"[MAIN] compiled and warmed up in {compile_seconds:.1f}s (not counted in any epoch)")

    learner.start()
    heartbeat.update("training", bound_ports(cfg), cfg.transport.host)
    pool = ActorPool(actor_main, dataclasses.replace(cfg, transport=transport), cfg.actors)
    if cfg.spawn_actors and not stopping.is_set():  # else external actors (launch.actor) lease or take the N slots
        pool.start()
    evaluator = (
        Evaluator(cfg, learner) if cfg.eval.every_env_steps > 0 and not cfg.collect_only and not stopping.is_set() else None
    )
    supervisor = Supervisor(cfg, learner, pool, evaluator)
    deadline = supervisor.start + cfg.duration if cfg.duration > 0 else 0.0
    reason = "failed"  # until the loop returns: an error exit keeps no replay (it may hold what caused the error)
    try:
        reason = learner.run(deadline=deadline, on_tick=supervisor.tick)
    finally:
        heartbeat.update("stopping")  # the sockets close from here on: no ports to check
        if supervisor.bar is not None:
            supervisor.bar.close()
        # read while the actors exit: their last batches leave their sockets only while someone reads them
        codes = pool.stop_all(timeout=10.0, while_waiting=lambda: learner.drain(timeout=0.05))
        if evaluator is not None:
            evaluator.stop()
        end = learner.shutdown(keep_replay=reason in ("stopped", "duration"))  # a run that may go on keeps what it collected
    print_accounting(end.ledger, end.rejects)
    elapsed, stats = time.monotonic() - supervisor.start, learner.processor_stats()
    say(format_processor_line(stats, stats.processed / max(elapsed, 1e-9)))
    if end.first_epoch_ratio is not None:
        say(f"[MAIN] first epoch after warm-up ran at {end.first_epoch_ratio:.0%} of the later epochs' updates/s")
    c, unwritten = learner.summary(), ""
    if not cfg.collect_only and c.updates and cfg.eval.final_episodes:
        if terminated.is_set():  # a container or job being stopped has seconds left, not minutes
            say(f"[MAIN] SIGTERM: no final evaluation (python -m launch.final_eval {run_dir} runs it)")
        else:
            heartbeat.update("final evaluation")
            unwritten = final_evaluation_or_skip(run_dir, stopping)
    if os.path.isfile(os.path.join(run_dir, BEST_NAME)):  # how to play the best weights, and what the run folder holds
        say(
            f"[MAIN] play the best evaluated weights: python -m launch.evaluate {run_dir} (the last checkpoint: add --net online)"
        )
    left = [name for name in RUN_RESULTS if os.path.exists(os.path.join(run_dir, name))]
    say(f"[MAIN] the run folder {run_dir} holds {', '.join(left) or 'no results'}")
    say(
        f"[MAIN] stopped after {elapsed:.1f}s by {stop_line(reason, cfg, c.inserted, c.updates)}: "
        f"epoch {c.epoch}, {c.updates} updates, {c.inserted:,} env steps, weights v{c.weights_version}, "
        f"actor weights versions {end.versions} (lag {end.lags}), actor exit codes {codes}"
        + (f"; checkpoint {os.path.join(run_dir, 'checkpoint.pt')}" if c.updates else "")
    )
    if unwritten:
        say(unwritten, file=sys.stderr)
    if end.checkpoint_failed:
        say(
            f"error: the last checkpoint could not be written (see above); {run_dir} keeps the newest one that was",
            file=sys.stderr,
        )
        return 1
    return EXIT_UNWRITTEN if unwritten else 0


def anneal_phrase(cfg: RunConfig) -> str:
    """The exploration schedule for the header: the run's anneal in its env steps (and share of the budget), each env's."""
    floors = [f"{e:.3g}" for a in range(min(cfg.actors, 8)) for e in epsilon_floors(cfg.actor, cfg.actors, a)]
    floors_said = f"its floor ({', '.join(floors)}{', ...' if cfg.actors > 8 else ''})"
    run, envs = cfg.actor.eps_anneal_env_steps, cfg.actors * cfg.actor.envs_per_actor
    if run <= 0:
        return f"each env plays at {floors_said} from its first step"
    share = f", {run / cfg.total_env_steps:.0%} of the budget" if cfg.total_env_steps else ""
    return (
        f"each env anneals from 1.0 to {floors_said} over {run:,} env steps of the run{share}: "
        f"{anneal_steps_per_env(cfg.actor, cfg.actors):,.0f} steps of each of its {envs} envs"
    )


def ratio_phrase(lc) -> str:
    """How the run holds its replay ratio, for the header."""
    if lc.samples_per_insert <= 0:
        return "replay ratio unlimited"
    if lc.holds_ratio:
        return (
            f"replay ratio held at {lc.samples_per_insert:g} samples per transition (within {lc.ratio_slack:,} "
            f"transitions; actors wait for a slower learner)"
        )
    return f"replay ratio at most {lc.samples_per_insert:g} samples per transition"


def stale_phrase(cfg: RunConfig) -> str:
    """The stale_weights limit in words (learner/data_plane.py ``weights_lag_limit``)."""
    limit, lag = weights_lag_limit(cfg), cfg.learner.max_weights_lag
    if limit == 0:
        return "no weights-lag limit"
    held = f" ({lag} + {limit - lag} the held pipeline of {cfg.actors} actors ages a batch)" if limit > lag else ""
    return f"batches played more than {limit:,} weights versions ago are refused{held}"


def env_steps_phrase(steps: int, lc) -> str:
    """``steps`` env steps and, when the replay ratio is set, the updates they hold at that ratio."""
    if lc.samples_per_insert <= 0:
        return f"{steps:,} env steps"
    updates = steps * lc.samples_per_insert / (lc.micro_batch * lc.accum_steps)
    return f"{steps:,} env steps ({updates:,.0f} updates)"


def periods_phrase(cfg: RunConfig, lc) -> str:
    """Every period of the run in env steps (learner/schedule.py), for the header."""
    parts = [
        f"target synced every {env_steps_phrase(lc.target_sync_env_steps, lc)}",
        f"weights broadcast every {env_steps_phrase(lc.broadcast_env_steps, lc)}",
    ]
    if lc.reset_env_steps:
        at = EnvStepPeriod(lc.reset_env_steps, 0, cfg.total_env_steps, lc.reset_env_steps)
        fire = at.multiples(cfg.total_env_steps) if cfg.total_env_steps else []
        when = f", at {', '.join(f'{k:,}' for k in fire) or 'no point'} of {cfg.total_env_steps:,}" if cfg.total_env_steps else ""
        parts.append(f"network reset every {env_steps_phrase(lc.reset_env_steps, lc)} (shrink {lc.reset_shrink:g}){when}")
    if cfg.replay.prioritized:
        beta_steps = cfg.replay.beta_steps(cfg.total_env_steps)
        parts.append(f"priority beta {cfg.replay.priority_beta:g} to 1 over {beta_steps:,} env steps")
    return "; ".join(parts)


def print_header(cfg: RunConfig, learner: Learner, run_dir: str, threads: int, resumed: bool) -> None:
    """The run's first [MAIN] lines: seed, folder and env, exploration and replay, evaluation schedule."""
    h = learner.header()
    lc, vectors = h.cfg, " (256-bit CPU vectors)" if h.vectors_pinned else ""
    mode = (
        "collecting only"
        if cfg.collect_only
        else f"training (AMP: {h.amp}, compile: {lc.compile}{vectors}, batch {lc.micro_batch} x "
        f"{lc.accum_steps}, {threads} torch thread(s), {'dueling' if cfg.net.dueling else 'Nature-DQN'} head)"
    )
    seeds = f" (actors {cfg.actor.seed}, learner {cfg.learner.seed}, evaluations {cfg.eval.seed})"
    if (cfg.actor.seed, cfg.learner.seed, cfg.eval.seed) == (cfg.seed,) * 3:
        seeds = ""
    say(f"[MAIN] seed {cfg.seed if cfg.seed >= 0 else 'not saved (an older run)'}{seeds}")
    label, device, spec = h.label, learner.device, spec_line(cfg, learner.entry, learner.spec)
    say(
        f"[MAIN] run folder {run_dir}, device {device}, {cfg.actors} actors x {cfg.actor.envs_per_actor} env(s) "
        f"on {cfg.env.name}{'' if label == cfg.env.name else ' ' + label} ({spec}), {mode}"
    )
    if cfg.actor.epsilon >= 0:
        say(f"[MAIN] exploration: fixed epsilon {cfg.actor.epsilon:g} in every env")
    else:
        say(
            f"[MAIN] exploration: {anneal_phrase(cfg)}; {ratio_phrase(lc)}, reward scale {lc.reward_scale:.4g}, "
            f"{cfg.replay.n_step}-step returns at discount {cfg.replay.gamma:g}, lr {lc.lr:g}, {h.rule}"
        )
    if not cfg.collect_only:
        say(f"[MAIN] periods: {periods_phrase(cfg, lc)}; {stale_phrase(cfg)}")
        ev = cfg.eval
        during = (
            f"every {env_steps_phrase(ev.every_env_steps, lc)}, {ev.episodes} episodes at epsilon {ev.epsilon:g}"
            if ev.every_env_steps
            else "none during training"
        )
        end = (
            f"the last weights and up to {ev.keep_snapshots} snapshots play {ev.select_episodes} fresh episodes, best.pt is the "
            f"last weights unless a snapshot beats them beyond chance, then both play {ev.final_episodes} more each"
            if ev.final_episodes
            else "none"
        )
        say(f"[MAIN] evaluation: {during}; at the end: {end} (seed {ev.seed})")
    if resumed:
        c = learner.summary()
        say(f"[MAIN] resumed at epoch {c.epoch}, {c.updates} updates, weights v{c.weights_version}")


def print_accounting(ledger: list, rejects: dict) -> None:
    """Each (incarnation, seq) is taken once: accepted + rejected + gaps == seqs; a repeat counts as a duplicate."""
    restarted = {e.slot for e in ledger if sum(f.slot == e.slot for f in ledger) > 1}
    for e in ledger:
        if e.slot in restarted or e.duplicate_batches or e.rejected_batches:
            say(
                f"[MAIN] actor {e.slot} incarnation {e.incarnation:#x}: seqs {e.next_seq - e.first_seq}, accepted "
                f"{e.accepted_batches}, rejected {e.rejected_batches}, duplicates {e.duplicate_batches}, gaps {e.gap_batches}"
            )
    say(
        f"[MAIN] accounting: {len(ledger)} incarnation(s) on {len({e.slot for e in ledger})} slot(s), "
        f"seqs {sum(e.next_seq - e.first_seq for e in ledger)}, accepted {sum(e.accepted_batches for e in ledger)}, "
        f"rejected {sum(e.rejected_batches for e in ledger)}, duplicates {sum(e.duplicate_batches for e in ledger)}, "
        f"gaps {sum(e.gap_batches for e in ledger)}; rejected by reason {rejects}"
    )


class Supervisor:
    """What the launcher does between the learner's epochs (``tick``, called from Learner.run), one step each."""

    def __init__(self, cfg: RunConfig, learner: Learner, pool: ActorPool, evaluator: Evaluator | None):
        self.cfg, self.learner, self.pool, self.evaluator = cfg, learner, pool, evaluator
        self.start = time.monotonic()
        self.budget = progress_budget(cfg)
        self.bar = None
        if cfg.progress and sys.stdout.isatty() and self.budget is not None:  # a redirected log: plain lines
            unit, total = self.budget
            seconds = "{l_bar}{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}]" if unit == "s" else None
            style = dict(unit=f" {unit}", unit_scale=unit != "s", dynamic_ncols=True, mininterval=1.0, bar_format=seconds)
            self.bar = tqdm(total=total, initial=min(self._done(unit), total), **style)
            learner.echo = self.bar.write
        self.logged_at, self.logged_processed = self.start, 0
        self.incarnations = [-1] * cfg.actors  # per slot: the incarnation whose batches the learner accepts
        self.silent_reported = False

    def tick(self) -> None:
        now = time.monotonic()
        if self.bar is not None:
            assert self.budget is not None  # the bar is made only with a budget
            self.bar.n = min(self.bar.total, self._done(self.budget[0]))
            self.bar.refresh()
        self.print_processor_line(now)
        self.restart_dead_actors()
        if self.evaluator is not None:
            self.evaluator.tick()
        self.report_silent_slots(now)
        self.report_new_incarnations()

    def _done(self, unit: str) -> int:
        c = self.learner.summary()
        return {"env steps": c.inserted, "updates": c.updates, "s": int(time.monotonic() - self.start)}[unit]

    def print_processor_line(self, now: float) -> None:
        """The [PROCESSOR] line every log_every seconds."""
        if now - self.logged_at >= self.cfg.log_every:
            stats = self.learner.processor_stats()
            rate = (stats.processed - self.logged_processed) / (now - self.logged_at)
            (self.bar.write if self.bar is not None else print)(format_processor_line(stats, rate))
            self.logged_at, self.logged_processed = now, stats.processed

    def restart_dead_actors(self) -> None:
        pool = self.pool
        for slot, delay in pool.restart_dead(before_start=self.learner.release_slot):
            if not delay:
                say(f"[MAIN] actor {slot} exited; restarted (restarts: {pool.restarts[slot]})")
            else:
                say(
                    f"[MAIN] actor {slot} exited (exit code {pool.procs[slot].exitcode}), its exit {pool.quick_exits[slot]} "
                    f"in a row within {QUICK_EXIT_S:g}s of a start; restarting in {delay:g}s (at most "
                    f"{BACKOFF_CAP_S:g}s apart; restarts: {pool.restarts[slot]})"
                )

    def report_silent_slots(self, now: float) -> None:
        """Once, SILENT_SLOT_NOTICE seconds in: the slots no actor has sent on (their replay shares stay empty)."""
        if self.silent_reported or now - self.start < SILENT_SLOT_NOTICE:
            return
        self.silent_reported = True
        silent = [slot for slot, inc in enumerate(self.learner.incarnations()) if inc < 0]
        if silent:
            self.learner.echo(
                f"[MAIN] actor slot(s) {silent} sent nothing in {SILENT_SLOT_NOTICE:.0f}s: their shares "
                f"of replay ({self.learner.stream_capacity:,} transitions per env) stay empty"
            )

    def report_new_incarnations(self) -> None:
        """A slot whose sender changed (a restarted or replaced actor) is named with its old and new incarnation."""
        for slot, incarnation in enumerate(self.learner.incarnations()):
            if incarnation != (was := self.incarnations[slot]):
                if was >= 0:
                    self.learner.echo(f"[MAIN] actor {slot} now sends as incarnation {incarnation:#x} (was {was:#x})")
                self.incarnations[slot] = incarnation


def final_evaluation_or_skip(run_dir: str, stopping: threading.Event) -> str:
    """launch/final_eval.py on the finished run; a (further) Ctrl-C or SIGTERM skips it, and says how to run it. The
    error line naming the results the disk refused ('' when all were written, or none were due)."""
    interrupt = signal.default_int_handler  # raises KeyboardInterrupt, whichever signal it handles
    later = f"python -m launch.final_eval {run_dir}"
    if stopping.is_set():
        say(f"[MAIN] the final evaluation follows; Ctrl-C again skips it ({later} runs it later)")
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    refused = result_writes(say)
    try:
        final_evaluation(run_dir, echo=say, refused=refused)
    except KeyboardInterrupt:
        say(f"[MAIN] final evaluation skipped; the checkpoint and snapshots are kept: {later}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run is over: only the last lines are left to print
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return unwritten_line(run_dir, refused)


class Evaluator:
    """The evaluation process (actors/eval_actor.py) and its two queues, driven from the launcher's tick."""

    def __init__(self, cfg: RunConfig, learner: Learner, target: Callable = eval_process_main):
        """``target(cfg, stop_event, requests, results)``: the evaluation process's body."""
        self.learner, self.target = learner, target
        ctx = spawn_context()
        self.stop_event = ctx.Event()
        self.requests, self.results = ctx.Queue(maxsize=1), ctx.Queue()
        self.args = (cfg, self.stop_event, self.requests, self.results)  # the evaluation process's, at each (re)start
        self.proc = start_process(ctx, target, self.args, name="evaluator")
        self.period = EnvStepPeriod(cfg.eval.every_env_steps, learner.summary().inserted)
        self.started_at, self.quick_exits = time.monotonic(), 0  # restarts back off as the actors' do
        self.due: float | None = None  # when the exited process starts again

    def tick(self) -> None:
        c = self.learner.summary()
        if self.period.due(c.inserted):
            request = dict(updates=c.updates, env_steps=c.inserted, wall_seconds=round(self.learner.elapsed(), 3))
            with contextlib.suppress(queue.Full):  # never wait: while the last evaluation still runs this one is skipped
                self.requests.put_nowait(request | {"weights": self.learner.current_weights()})
        while True:
            try:
                self.learner.record_eval(self.results.get_nowait())
            except queue.Empty:
                break
        if self.proc.is_alive() or self.stop_event.is_set():
            return
        now = time.monotonic()
        if self.due is None:
            self.quick_exits = self.quick_exits + 1 if now - self.started_at < QUICK_EXIT_S else 0
            delay = backoff_delay(self.quick_exits)
            self.due = now + delay
            wait = f" in {delay:g}s (its exit {self.quick_exits} in a row within {QUICK_EXIT_S:g}s of its start)" if delay else ""
            self.learner.echo(f"[MAIN] the evaluation process exited ({self.proc.exitcode}); restarting{wait}")
        if now >= self.due:
            self.due, self.started_at = None, now
            self.proc = start_process(spawn_context(), self.target, self.args, name="evaluator")

    def stop(self) -> None:
        # a request carries the weights (megabytes): one the evaluator never took must not hold up our exit
        self.requests.cancel_join_thread()
        stop_processes([self.proc], self.stop_event, timeout=5.0)


def main(argv: list[str] | None = None) -> int:
    signals = StopSignals().install()
    argv = sys.argv[1:] if argv is None else argv

    def body() -> int:
        command = parse_launch(argv, description=__doc__)  # a bad --config: ConfigError, exit 2
        if command.print_config:
            return print_config(command.cfg, command.given)
        return run(command.cfg, signals, command.given)

    return exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
