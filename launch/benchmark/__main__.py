"""Measure the data plane, every stage in one run so ratios share one machine state.

    python -m launch.benchmark --actors 2 --seconds 20 --json bench.json

Each stage (``--stages``; docs/benchmark.md gives their figures) warms up before its timed window; env_ceiling and
collection rounds alternate so the machine's drift hits both alike.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from launch.benchmark.collection import collection, env_ceiling
from launch.benchmark.learner import learner_stage
from launch.benchmark.options import COLLECTIONS, STAGES, BenchConfig, apply_quick
from launch.benchmark.replay import priority_stage, replay_stage
from launch.benchmark.starts import starts_stage
from launch.benchmark.system import system_stage
from launch.benchmark.tables import machine, render_table
from launch.benchmark.transport import transport
from launch.cli import UsageError, load_plugin, plain, run_config_type, subclass
from launch.cli import parse as cli_parse
from shared.config import RunConfig
from shared.config_migration import read_config
from shared.resolution import resolve_config


def main(bench: BenchConfig) -> dict:
    if unknown := sorted(set(bench.stages) - set(STAGES)):
        raise SystemExit(f"error: stages={unknown} unknown; choose from {list(STAGES)}")
    if bench.quick:
        apply_quick(bench)
    cfg = bench.run
    if bench.env:
        cfg.env.name = bench.env  # resolve_config() below names a bad value and gives the auto fields this env's values
    cfg.actors = bench.actors
    cfg.collect_only = True
    cfg = resolve_config(cfg)
    started = time.monotonic()
    result: dict = {"machine": machine()}
    print(f"machine: {result['machine']}", flush=True)
    stage_seconds: dict[str, float] = {}
    mark = [time.monotonic()]

    def lap(name: str) -> None:
        stage_seconds[name] = time.monotonic() - mark[0]
        mark[0] = time.monotonic()

    def stage(name: str, run: Callable[[], dict], say: Callable[[dict], str] | None = None) -> None:
        if name in bench.stages:
            result[name] = run()
            if say:
                print(say(result[name]), flush=True)
            lap(name)

    if "env_ceiling" in bench.stages or "collection" in bench.stages:
        result.update(ceiling_and_collection(cfg, bench))
        lap("env_ceiling_and_collection")
    stage(
        "transport",
        lambda: transport(cfg, bench.transport_senders, bench.transport_batch, bench.transport_seconds),
        lambda t: f"transport: {t['transitions_per_s']:,.0f} transitions/s, {t['mb_per_s']:,.0f} MB/s",
    )
    stage("replay", lambda: replay_stage(cfg), lambda p: f"replay: {p}")
    stage("priority", lambda: priority_stage(cfg, bench.priority_capacities, bench.priority_batches))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    stage("learner", lambda: learner_stage(cfg, device, bench.learner_updates, bench.learner_epochs))
    stage("system", lambda: system_stage(cfg, device, bench))
    stage(
        "starts",
        lambda: starts_stage(cfg, bench.rounds, bench.starts_warm_up, bench.starts_env_steps),
        lambda s: f"starts: on/off speed {s['speed_on_over_off']:.2f}, RSS on - off {s['rss_on_minus_off_mb']:+.0f} MB",
    )
    result["machine"] |= {"benchmark_seconds": time.monotonic() - started, "stage_seconds": stage_seconds, "quick": bench.quick}
    if bench.json:  # before rendering: the figures are kept whatever happens to the table
        with open(bench.json, "w") as fh:
            json.dump(result, fh, indent=2)
    print(render_table(result), flush=True)
    return result


def ceiling_and_collection(cfg: RunConfig, bench: BenchConfig) -> dict:
    """The env_ceiling and collection stages in alternating rounds: their ``result`` entries."""
    ceilings: list[dict] = []
    rounds: dict[str, list[dict]] = {kind: [] for kind, *_ in COLLECTIONS}
    for r in range(bench.rounds):
        if "env_ceiling" in bench.stages:
            ceilings.append(env_ceiling(cfg, bench.actors, bench.seconds))
            print(f"round {r} env_ceiling: {ceilings[-1]['steps_per_s']:.1f} steps/s", flush=True)
        if "collection" in bench.stages:
            for kind, label, setting, value in COLLECTIONS:
                kind_cfg = read_config(cfg.to_json())
                setattr(kind_cfg.actor, setting, value)
                rounds[kind].append(collection(kind_cfg, bench.seconds))
                print(f"round {r} collection ({label}): {rounds[kind][-1]['transitions_per_s']:.1f} transitions/s", flush=True)
    result: dict = {}
    if ceilings:
        result["env_ceiling"] = {"rounds": ceilings, "steps_per_s": statistics.mean(c["steps_per_s"] for c in ceilings)}
    if rounds["apex"]:
        result["collection"] = collection_figures(rounds, ceilings)
        if ceilings:  # CPU cost per transition, all processes (actors + learner) vs bare env: robust to outside load
            result["env_ceiling"]["cpu_us_per_step"] = statistics.mean(c["cpu_us_per_step"] for c in ceilings)
    return result


def collection_figures(rounds: dict[str, list[dict]], ceilings: list[dict]) -> dict:
    """The collection stage's entry: each kind's rounds, rate and env share; against the env ceiling, its efficiencies."""
    out: dict = {f"rounds_{kind}": runs for kind, runs in rounds.items()}
    out |= {f"transitions_per_s_{kind}": statistics.mean(c["transitions_per_s"] for c in runs) for kind, runs in rounds.items()}
    for kind, runs in rounds.items():
        shares = [c["actor_env_share"] for c in runs]  # inside the actors: does not drift with the host
        out[f"actor_env_share_{kind}"] = None if None in shares else statistics.mean(shares)
    if ceilings:
        ceiling = statistics.mean(c["steps_per_s"] for c in ceilings)
        out |= {f"efficiency_{kind}": out[f"transitions_per_s_{kind}"] / ceiling for kind in rounds}
        bare_us = statistics.mean(c["cpu_us_per_step"] for c in ceilings)
        for kind, runs in rounds.items():
            us = statistics.mean(c["cpu_us_per_transition"] for c in runs)
            out[f"cpu_us_per_transition_{kind}"], out[f"cpu_efficiency_{kind}"] = us, bare_us / us
    return out


def parse(argv: list[str]) -> BenchConfig:
    """The benchmark's command line; ``--run.*`` is a RunConfig with each env's options under its name. A value tyro
    rejects raises UsageError."""
    load_plugin(argv)
    run_type = run_config_type()
    bench_type = subclass(BenchConfig, [("run", run_type, run_type)])
    parsed: Any = cli_parse(bench_type, argv, "python -m launch.benchmark", (__doc__ or "").split("\n\n")[0])
    return dataclasses.replace(parsed, run=plain(parsed.run))


if __name__ == "__main__":
    try:
        bench = parse(sys.argv[1:])
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    main(bench)
