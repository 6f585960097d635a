"""Stage starts (``--stages starts``): one actor's collection with saved-state starts off and on, in alternating rounds.

Each arm runs in a fresh process (its RSS is its own): it builds a Collector, plays ``starts_warm_up`` env steps (the
chooser learns where episodes end), then times ``starts_env_steps`` env steps. Figures: env steps/s, RSS at the end,
and with starts on the parks (an emulator replayed to a saved state) and their seconds.
"""

from __future__ import annotations

import dataclasses
import resource
import signal
import statistics
import time

import psutil
import torch

from actors.collector import Collector
from launch.processes import spawn_context, start_process
from shared.config import RunConfig
from shared.resolution import resolve_run

SHARE_ON = 0.5  # the "on" arm's actor.start_share


def _arm(cfg: RunConfig, share: float, warm_up: int, env_steps: int, out) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    run = resolve_run(dataclasses.replace(cfg, actor=dataclasses.replace(cfg.actor, start_share=share)), device="cpu")
    collector = Collector(run, 0, 1, 0)
    per_batch = run.cfg.actor.batch_steps * collector.env.num_envs
    seq = played = 0
    while played < warm_up:
        collector.collect(run.cfg.actor.batch_steps, seq)
        seq, played = seq + 1, played + per_batch
    pads = [getattr(env, "inner", None) for env in getattr(collector.env, "envs", [])]
    parks0 = sum(getattr(p, "parks", 0) for p in pads)
    park_s0 = sum(getattr(p, "park_seconds", 0.0) for p in pads)
    start, timed = time.perf_counter(), 0
    while timed < env_steps:
        collector.collect(run.cfg.actor.batch_steps, seq)
        seq, timed = seq + 1, timed + per_batch
    seconds = time.perf_counter() - start
    starts = collector.starts
    out.put(
        dict(
            share=share,
            env_steps=timed,
            steps_per_s=timed / seconds,
            rss_mb=psutil.Process().memory_info().rss / 2**20,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            parks=sum(getattr(p, "parks", 0) for p in pads) - parks0,
            park_seconds=sum(getattr(p, "park_seconds", 0.0) for p in pads) - park_s0,
            starts=starts.counts.tolist() if starts is not None else None,
        )
    )
    collector.close()


def starts_stage(cfg: RunConfig, rounds: int, warm_up: int, env_steps: int) -> dict:
    """Alternate off and on ``rounds`` times; each arm's mean figures and the on/off ratios."""
    ctx = spawn_context()
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for r in range(rounds):
        for arm, share in (("off", 0.0), ("on", SHARE_ON)):
            out = ctx.Queue()
            proc = start_process(ctx, _arm, (cfg, share, warm_up, env_steps, out), f"starts-{arm}")
            runs[arm].append(out.get(timeout=600))
            proc.join(timeout=30)
            got = runs[arm][-1]
            print(
                f"round {r} starts {arm}: {got['steps_per_s']:.1f} env steps/s, RSS {got['rss_mb']:.0f} MB, "
                f"{got['parks']} parks ({got['park_seconds']:.1f} s)",
                flush=True,
            )
    keys = ("steps_per_s", "rss_mb", "parks", "park_seconds")
    mean = {arm: {k: statistics.mean(g[k] for g in got) for k in keys} for arm, got in runs.items()}
    return {
        "rounds": runs,
        **{f"{k}_{arm}": v for arm, figures in mean.items() for k, v in figures.items()},
        "speed_on_over_off": mean["on"]["steps_per_s"] / mean["off"]["steps_per_s"],
        "rss_on_minus_off_mb": mean["on"]["rss_mb"] - mean["off"]["rss_mb"],
    }
