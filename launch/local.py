"""Run warppipe on one machine: the learner in this process, N actor processes beside it.

    python -m launch.local --actors 4                      # train Mario until Ctrl-C
    python -m launch.local --actors 4 --duration 300       # ... for 5 minutes
    python -m launch.local --actors 2 --collect-only       # the data plane alone
    python -m launch.local --resume runs/20261121-...      # continue a run from its folder
    python -m launch.local --actors 2 --no-spawn-actors    # learner only; actors: python -m actors.run --actor-id I

Prints the seed's ``[PROCESSOR]`` line every ``--log-every`` seconds and a ``[MAIN] Epoch``
line per epoch; restarts an actor that dies; on Ctrl-C, SIGTERM or the end of ``--duration`` /
``--learner.steps`` it writes the final checkpoint, stops every child and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import tyro
from tqdm import tqdm

from actors.collector import actor_main
from launch.processes import ActorPool
from learner.loop import Learner, load_resume_state
from shared.config import ConfigError, RunConfig, from_dict

# Options a resumed run takes from the command line; everything else comes from the run folder.
RESUME_OVERRIDES = ("duration", "log_every", "progress", "resume", "spawn_actors")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_run_dir(cfg: RunConfig) -> str:
    path = os.path.join(cfg.run_dir, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    return path


def resumed_config(cli: RunConfig) -> RunConfig:
    """The run folder's saved config, with the few options a resume may change taken from the CLI."""
    path = os.path.join(cli.resume, "config.json")
    if not os.path.exists(path):
        raise ConfigError(f"resume={cli.resume!r} is not a run folder (no config.json)")
    with open(path) as fh:
        saved = from_dict(RunConfig, json.load(fh))
    for name in RESUME_OVERRIDES:
        setattr(saved, name, getattr(cli, name))
    saved.learner.steps = cli.learner.steps
    return saved


def run(cfg: RunConfig) -> int:
    cfg.validate()
    resume_state = None
    if cfg.resume:
        cfg = resumed_config(cfg).validate()
        run_dir = cfg.resume
    else:
        run_dir = make_run_dir(cfg)
        with open(os.path.join(run_dir, "config.json"), "w") as fh:
            fh.write(cfg.to_json())
    device = resolve_device(cfg.device)
    threads = cfg.learner.threads or max(1, (os.cpu_count() or 1) - cfg.actors)
    torch.set_num_threads(threads)  # actors each keep a core busy; spin-waiting extra threads only slow us down
    if cfg.resume:
        resume_state = load_resume_state(run_dir, device)
    learner = Learner(cfg, run_dir, device, resume_state)
    lc = learner.dqn.cfg
    mode = "collecting only" if cfg.collect_only else f"training (AMP: {learner.dqn.amp_dtype or 'off'}, " \
        f"compile: {lc.compile}, batch {lc.micro_batch} x {lc.accum_steps}, {threads} torch thread(s))"
    print(f"[MAIN] run folder {run_dir}, device {device}, {cfg.actors} actors x {cfg.actor.envs_per_actor} env(s) "
          f"on {cfg.env.name} {cfg.env.stage}, {mode}", flush=True)
    if resume_state is not None:
        c = learner.counters
        print(f"[MAIN] resumed at epoch {c.epoch}, {c.updates} updates, weights v{c.weights_version}", flush=True)
    compile_seconds = learner.compile()
    if compile_seconds:
        print(f"[MAIN] compiled and warmed up in {compile_seconds:.1f}s (not counted in any epoch)", flush=True)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec: children never see Ctrl-C
    learner.start()
    pool = ActorPool(actor_main, cfg, cfg.actors)
    if cfg.spawn_actors:  # else external actors (python -m actors.run) connect to the N slots
        pool.start()
    signal.signal(signal.SIGINT, lambda *_: learner.stop())
    signal.signal(signal.SIGTERM, lambda *_: learner.stop())

    start = time.monotonic()
    deadline = start + cfg.duration if cfg.duration > 0 else 0.0
    bar = None
    if cfg.progress and (cfg.duration > 0 or cfg.learner.steps > 0) and not cfg.collect_only:
        if cfg.learner.steps:
            bar = tqdm(total=cfg.learner.steps, unit="upd", dynamic_ncols=True, mininterval=1.0)
        else:
            bar = tqdm(total=int(cfg.duration), dynamic_ncols=True, mininterval=1.0,
                       bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}]")
        learner.echo = bar.write
    log = {"at": start, "processed": 0}
    incarnations = [-1] * cfg.actors  # per slot: the incarnation whose batches the learner accepts

    def on_tick() -> None:
        now = time.monotonic()
        if bar is not None:
            bar.n = learner.counters.updates if cfg.learner.steps else int(now - start)
            bar.refresh()
        if now - log["at"] >= cfg.log_every:
            processed = learner.plane.processed
            line = learner.processor_line((processed - log["processed"]) / (now - log["at"]))
            (bar.write if bar is not None else print)(line)
            log.update(at=now, processed=processed)
        for slot in pool.restart_dead():
            print(f"[MAIN] actor {slot} exited; restarted (restarts: {pool.restarts[slot]})", flush=True)
        for slot, track in enumerate(learner.plane.consolidator.tracks):
            if track.incarnation != incarnations[slot]:
                if incarnations[slot] >= 0:
                    learner.echo(f"[MAIN] actor {slot} now sends as incarnation {track.incarnation:#x} "
                                 f"(was {incarnations[slot]:#x})")
                incarnations[slot] = track.incarnation

    try:
        learner.run(deadline=deadline, on_tick=on_tick)
    finally:
        if bar is not None:
            bar.close()
        codes = pool.stop_all(timeout=10.0)
        learner.plane.drain_until_quiet(quiet=0.5, timeout=5.0)  # what the actors flushed on their way out
        lags, versions = learner.weights_lag(), learner.actor_weights_versions()
        ledger, rejects = learner.plane.ledger(), dict(learner.plane.consolidator.rejects)
        learner.close()
    # Each (incarnation, seq) is taken once: accepted + rejected + gaps == seqs; a repeat counts as a duplicate.
    restarted = {e.slot for e in ledger if sum(f.slot == e.slot for f in ledger) > 1}
    for e in ledger:
        if e.slot in restarted or e.duplicate_batches or e.rejected_batches:
            print(f"[MAIN] actor {e.slot} incarnation {e.incarnation:#x}: seqs {e.next_seq - e.first_seq}, "
                  f"accepted {e.accepted_batches}, rejected {e.rejected_batches}, duplicates {e.duplicate_batches}, "
                  f"gaps {e.gap_batches}", flush=True)
    print(f"[MAIN] accounting: {len(ledger)} incarnation(s) on {len({e.slot for e in ledger})} slot(s), "
          f"seqs {sum(e.next_seq - e.first_seq for e in ledger)}, accepted {sum(e.accepted_batches for e in ledger)}, "
          f"rejected {sum(e.rejected_batches for e in ledger)}, duplicates {sum(e.duplicate_batches for e in ledger)}, "
          f"gaps {sum(e.gap_batches for e in ledger)}; rejected by reason {rejects}", flush=True)
    print(learner.processor_line(learner.plane.processed / max(time.monotonic() - start, 1e-9)), flush=True)
    c = learner.counters
    ratio = learner.first_epoch_ratio()
    if ratio is not None:
        print(f"[MAIN] first epoch after warm-up ran at {ratio:.0%} of the later epochs' updates/s", flush=True)
    print(f"[MAIN] stopped after {time.monotonic() - start:.1f}s: epoch {c.epoch}, {c.updates} updates, "
          f"weights v{c.weights_version}, actor weights versions {versions} (lag {lags}), actor exit codes {codes}"
          + (f"; checkpoint {os.path.join(run_dir, 'checkpoint.pt')}" if c.updates else ""), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    cfg = tyro.cli(RunConfig, args=argv)
    try:
        return run(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
