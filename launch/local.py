"""Run warppipe on one machine: the learner in this process, N actor processes beside it.

    python -m launch.local --actors 4 --collect-only --duration 60

Prints the seed's ``[PROCESSOR]`` line every ``--log-every`` seconds, restarts
an actor that dies, and on Ctrl-C or at the end of ``--duration`` stops every
child and exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import tyro

from actors.collector import actor_main
from launch.processes import ActorPool
from learner.data_plane import DataPlane, format_processor_line
from shared.config import ConfigError, RunConfig
from shared.env import num_actions_for


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_run_dir(cfg: RunConfig) -> str:
    path = os.path.join(cfg.run_dir, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        fh.write(cfg.to_json())
    return path


def run(cfg: RunConfig) -> int:
    cfg.validate()
    if not cfg.collect_only:
        print("[MAIN] training is not built yet (issue 3); running the data plane only (--collect-only)", flush=True)
    device = resolve_device(cfg.device)
    run_dir = make_run_dir(cfg)
    print(f"[MAIN] run folder {run_dir}, learner device {device}, {cfg.actors} actors x "
          f"{cfg.actor.envs_per_actor} env(s) on {cfg.env.name} {cfg.env.stage}", flush=True)
    plane = DataPlane(cfg, num_actions_for(cfg.env), device).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec: children never see Ctrl-C
    pool = ActorPool(actor_main, cfg, cfg.actors).start()
    interrupted = []
    signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    signal.signal(signal.SIGTERM, lambda *_: interrupted.append(True))
    start = last_log = time.monotonic()
    last_processed = 0
    try:
        while not interrupted and (cfg.duration <= 0 or time.monotonic() - start < cfg.duration):
            plane.drain(timeout=0.1)
            now = time.monotonic()
            if now - last_log >= cfg.log_every:
                stats = plane.stats()
                print(format_processor_line(stats, (stats.processed - last_processed) / (now - last_log)), flush=True)
                last_log, last_processed = now, stats.processed
                for slot in pool.restart_dead():
                    print(f"[MAIN] actor {slot} exited; restarted (restarts: {pool.restarts[slot]})", flush=True)
    finally:
        codes = pool.stop_all(timeout=10.0)
        plane.drain()
        plane.close()
    stats = plane.stats()
    print(format_processor_line(stats, stats.processed / max(time.monotonic() - start, 1e-9)), flush=True)
    print(f"[MAIN] stopped after {time.monotonic() - start:.1f}s; actor exit codes {codes}", flush=True)
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
