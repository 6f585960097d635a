"""Measure the data plane, every stage in one run so ratios share one machine state.

    python -m launch.benchmark --actors 2 --seconds 20 --json bench.json

Stages (``--stages``):
  env_ceiling  K bare Mario processes, same preprocessing, random actions: steps/s (Snake and fuel breaks,
               ``--run.env.name snake|fuelbreak``: K processes each stepping one vector env of
               ``--run.actor.envs-per-actor`` envs with random valid actions: transitions/s)
  collection   K real actors -> sockets -> consolidation -> replay, no training: transitions/s,
               and efficiency = collection / env_ceiling (with random actions, and with Ape-X
               epsilon-greedy inference)
  transport    synthetic 84x84 batches, no env, through socket, consolidation and replay
  replay       bytes per stored transition; add and sample(512) rates
  priority     prioritized vs uniform replay: sample and priority-update cost per batch of 512 and 2048
               at capacity 100K and 1M (84x84 frames: 1M slots take 7 GB per replay, one at a time)
  learner      the learner alone on a filled replay: fp32 eager, AMP, AMP + compile, each with and
               without gradient accumulation; compile time apart
  system       the whole system twice, same actors, same seconds: the seed's *original* pipeline
               (launch/original.py: one lock-protected multiprocessing queue, batch 256, fp32, no
               compile, sync every 3 epochs) and warppipe's *optimized* one (per-actor sockets, batch
               512 x 4 accumulation, AMP, compile, sync every 5); the seed's table with both columns
``--quick`` shrinks every window so the whole run takes under 3 minutes on 2 CPU cores.
Every stage warms up before its timed window. Rounds of env_ceiling and collection alternate
(``--rounds``) so slow drift of the machine hits both sides alike.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from typing import Any

import torch
import tyro

from launch.benchmark.collection import collection, env_ceiling
from launch.benchmark.config import STAGES, BenchConfig, apply_quick
from launch.benchmark.learner import learner_stage
from launch.benchmark.replay import priority_stage, replay_stage
from launch.benchmark.report import machine, render_table
from launch.benchmark.system import system_stage
from launch.benchmark.transport import transport
from launch.cli import load_plugin, plain, run_config_type
from shared.config import RunConfig
from shared.config_migration import read_config
from shared.resolution import resolve_config


def main(bench: BenchConfig) -> dict:
    unknown = sorted(set(bench.stages) - set(STAGES))
    if unknown:
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

    if "env_ceiling" in bench.stages or "collection" in bench.stages:
        result.update(ceiling_and_collection(cfg, bench))
        lap("env_ceiling_and_collection")
    if "transport" in bench.stages:
        result["transport"] = transport(cfg, bench.transport_senders, bench.transport_batch, bench.transport_seconds)
        print(
            f"transport: {result['transport']['transitions_per_s']:,.0f} transitions/s, "
            f"{result['transport']['mb_per_s']:,.0f} MB/s",
            flush=True,
        )
        lap("transport")
    if "replay" in bench.stages:
        result["replay"] = replay_stage(cfg)
        print(f"replay: {result['replay']}", flush=True)
        lap("replay")
    if "priority" in bench.stages:
        result["priority"] = priority_stage(cfg, bench.priority_capacities, bench.priority_batches)
        lap("priority")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "learner" in bench.stages:
        result["learner"] = learner_stage(cfg, device, bench.learner_updates, bench.learner_epochs)
        lap("learner")
    if "system" in bench.stages:
        result["system"] = system_stage(cfg, device, bench)
        lap("system")
    result["machine"]["benchmark_seconds"] = time.monotonic() - started
    result["machine"]["stage_seconds"] = stage_seconds
    result["machine"]["quick"] = bench.quick
    if bench.json:  # before rendering: the figures are kept whatever happens to the table
        with open(bench.json, "w") as fh:
            json.dump(result, fh, indent=2)
    print(render_table(result), flush=True)
    return result


def ceiling_and_collection(cfg: RunConfig, bench: BenchConfig) -> dict:
    """The env_ceiling and collection stages in alternating rounds: their ``result`` entries, with collection's
    efficiency against the ceiling when both ran."""
    ceilings, collections, collections_random = [], [], []
    for r in range(bench.rounds):
        if "env_ceiling" in bench.stages:
            ceilings.append(env_ceiling(cfg, bench.actors, bench.seconds))
            print(f"round {r} env_ceiling: {ceilings[-1]['steps_per_s']:.1f} steps/s", flush=True)
        if "collection" in bench.stages:
            random_cfg = read_config(cfg.to_json())
            random_cfg.actor.epsilon = 1.0
            collections_random.append(collection(random_cfg, bench.seconds))
            print(
                f"round {r} collection (random actions): {collections_random[-1]['transitions_per_s']:.1f} transitions/s",
                flush=True,
            )
            apex_cfg = read_config(cfg.to_json())
            apex_cfg.actor.eps_anneal_steps = 0  # the floors from the first step: inference runs as in late training
            collections.append(collection(apex_cfg, bench.seconds))
            print(
                f"round {r} collection (Ape-X eps-greedy): {collections[-1]['transitions_per_s']:.1f} transitions/s",
                flush=True,
            )
    result: dict = {}
    if ceilings:
        result["env_ceiling"] = {"rounds": ceilings, "steps_per_s": statistics.mean(c["steps_per_s"] for c in ceilings)}
    if collections:
        result["collection"] = collection_figures(collections_random, collections, ceilings)
    if ceilings and collections:
        # CPU cost per transition, all processes (actors + learner) vs bare env: robust to outside load
        result["env_ceiling"]["cpu_us_per_step"] = statistics.mean(c["cpu_us_per_step"] for c in ceilings)
    return result


def collection_figures(collections_random: list[dict], collections: list[dict], ceilings: list[dict]) -> dict:
    """The collection stage's entry: each kind's rounds and mean rate and actor env share, and against the env
    ceiling's rounds (if any) its efficiency and CPU cost per transition."""
    random_rate = statistics.mean(c["transitions_per_s"] for c in collections_random)
    apex_rate = statistics.mean(c["transitions_per_s"] for c in collections)
    out: dict = {
        "rounds_random": collections_random,
        "rounds_apex": collections,
        "transitions_per_s_random": random_rate,
        "transitions_per_s_apex": apex_rate,
    }
    for kind, rounds in (("random", collections_random), ("apex", collections)):
        shares = [c["actor_env_share"] for c in rounds]  # inside the actors: does not drift with the host
        out[f"actor_env_share_{kind}"] = None if None in shares else statistics.mean(shares)
    if ceilings:
        ceiling = statistics.mean(c["steps_per_s"] for c in ceilings)
        out["efficiency_random"] = random_rate / ceiling
        out["efficiency_apex"] = apex_rate / ceiling
        bare_us = statistics.mean(c["cpu_us_per_step"] for c in ceilings)
        for kind, rounds in (("random", collections_random), ("apex", collections)):
            us = statistics.mean(c["cpu_us_per_transition"] for c in rounds)
            out[f"cpu_us_per_transition_{kind}"] = us
            out[f"cpu_efficiency_{kind}"] = bare_us / us
    return out


def parse(argv: list[str]) -> BenchConfig:
    """The benchmark's command line; ``--run.*`` is a RunConfig with each env's options under its name."""
    load_plugin(argv)
    run_type = run_config_type()
    bench_type = dataclasses.make_dataclass(
        "BenchConfig", [("run", run_type, dataclasses.field(default_factory=run_type))], bases=(BenchConfig,)
    )
    bench_type.__doc__ = BenchConfig.__doc__
    parsed: Any = tyro.cli(bench_type, args=argv)
    return dataclasses.replace(parsed, run=plain(parsed.run))


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
