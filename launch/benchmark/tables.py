"""The machine a benchmark ran on, and the tables it prints."""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import time
from collections.abc import Callable

import psutil
import torch
import zmq

from launch.benchmark.learner import rates_text
from launch.benchmark.options import COLLECTIONS
from launch.benchmark.replay import render_priority_table
from launch.machine import describe_machine

# The installed packages whose versions machine() records (absent ones are left out)
PACKAGES = "torch numpy pyzmq msgpack gym-super-mario-bros nes-py gym gymnasium opencv-python-headless nvidia-ml-py".split()


def machine() -> dict:
    """launch/machine.py's description (CPU, cores and their topology, bf16, GPU) and what else the run depends on."""
    packages = {}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            packages[name] = importlib.metadata.version(name)
    return describe_machine() | {
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libzmq": zmq.zmq_version(),
        "packages": packages,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def render_table(r: dict) -> str:
    """One row or more per stage that ran (env_ceiling to learner), then the priority and system tables."""
    rows = [row for stage, rows_of in MAIN_ROWS.items() if stage in r for row in rows_of(r[stage], r)]
    text = "\n".join(["| figure | value |", "|---|---|", *rows]) if rows else ""
    if "priority" in r:
        text += "\n\n" + render_priority_table(r["priority"])
    if "system" in r:
        text += "\n\n" + render_system_table(r["system"])
    if "starts" in r:
        text += "\n\n" + render_starts_table(r["starts"])
    return text


def render_starts_table(s: dict) -> str:
    """Saved-state starts off against on (one actor, alternating rounds): speed, RSS and the parks' cost."""
    rows = [
        f"| {arm} | {s['steps_per_s_' + arm]:,.1f} | {s['rss_mb_' + arm]:,.0f} | {s['parks_' + arm]:,.1f} | "
        f"{s['park_seconds_' + arm]:,.1f} |"
        for arm in ("off", "on")
    ]
    head = "| starts | env steps/s | actor RSS MB | parks | park seconds |\n|---|---|---|---|---|"
    tail = f"on/off speed {s['speed_on_over_off']:.3f}, RSS on - off {s['rss_on_minus_off_mb']:+.1f} MB"
    return f"{head}\n" + "\n".join(rows) + f"\n\n{tail}"


def _collection_rows(c: dict, r: dict) -> list[str]:
    rows = []
    for kind, label, *_ in COLLECTIONS:
        text = f"| collection into replay, {label} | {c['transitions_per_s_' + kind]:,.1f} transitions/s"
        if f"efficiency_{kind}" in c:
            text += (
                f" ({c['efficiency_' + kind]:.1%} of ceiling; CPU per transition {c['cpu_us_per_transition_' + kind]:,.0f} us = "
                f"{c['cpu_efficiency_' + kind]:.1%} of bare {r['env_ceiling']['cpu_us_per_step']:,.0f} us)"
            )
        if c.get(f"actor_env_share_{kind}") is not None:
            text += f"; the actors spent {c['actor_env_share_' + kind]:.1%} of their time in the envs' step"
        rows.append(text + " |")
    return rows


def _learner_rows(lr_: dict, r: dict) -> list[str]:
    on = f"batch {lr_['micro_batch']}"
    rows = [
        f"| learner as a run sets it, {kind} replay, {on} ({lr_['device']}) | {rates_text(lr_[f'run_{kind}'])} |"
        for kind in ("prioritized", "uniform")
    ]
    split = lr_["split"]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in split.items() if k != "total")
    rows.append(
        f"| one update, prioritized (ms) | {parts}; total {split['total']:.2f} (targets and BatchNorm's pass are inside loss) |"
    )
    for key in ("fp32_eager", "amp_eager", "amp_compiled"):
        for accum in (1, 4):
            v = lr_[f"{key}_accum{accum}"]
            compiled = f", compile {v['compile_seconds']:.1f} s" if v["compile_seconds"] else ""
            rows.append(
                f"| learner {key.replace('_', ' ')}, {on} x {accum} ({lr_['device']}) | {rates_text(v)}, first epoch "
                f"{v['first_epoch_ratio']:.0%} of steady{compiled} |"
            )
    speedups = ((accum, lr_[f"speedup_amp_compiled_vs_fp32_accum{accum}"]) for accum in (1, 4))
    return rows + [f"| AMP + compile vs fp32 eager, x{accum} accumulation | {speedup:.2f}x |" for accum, speedup in speedups]


# Each stage's rows of the main table, in this order, from (its result entry, the whole result)
MAIN_ROWS: dict[str, Callable[[dict, dict], list[str]]] = {
    "env_ceiling": lambda e, r: [
        f"| env ceiling, {e['rounds'][0]['processes']} bare {e['rounds'][0]['env']} env processes | "
        f"{e['steps_per_s']:,.1f} steps/s |"
    ],
    "collection": _collection_rows,
    "transport": lambda t, r: [
        f"| transport ceiling (synthetic 84x84, {t['senders']} sender) | {t['transitions_per_s']:,.0f} transitions/s, "
        f"{t['mb_per_s']:,.0f} MB/s |"
    ],
    "replay": lambda p, r: [
        f"| replay bytes per transition | {p['bytes_per_transition']:,} (naive uint8 stacks "
        f"{p['naive_uint8_stacked_bytes']:,}, float32 {p['naive_float32_bytes']:,}) |",
        f"| replay sample(512) | {p['sample_512_ms']:.2f} ms ({p['samples_per_s']:,.0f} samples/s) |",
    ],
    "learner": _learner_rows,
}


def render_system_table(s: dict) -> str:
    """The seed's table (its five rows first) with measured Original, Optimized and Improvement columns."""
    o, p = s["original"], s["optimized"]
    os_, ps = s["original_settings"], s["optimized_settings"]
    precision = "full precision" if ps["amp"] == "None" else f"AMP {ps['amp']}"  # the autocast dtype ('None': off)
    rows = [
        f"Whole system, {s['actors']} actors x {s['envs_per_actor']} env(s), device {s['device']}; original: "
        f"one locked mp.Queue, batch {os_['batch']}, fp32, sync every {os_['sync_every']} epochs; optimized: "
        f"per-actor sockets, batch {ps['micro_batch']} x {ps['accum_steps']}, {precision}, compile, "
        f"weights broadcast every {ps['broadcast_env_steps']:,} env steps; epoch = {s['updates_per_epoch']} updates",
        "",
        "| Metric | Original | Optimized | Improvement |",
        "|---|---|---|---|",
    ]

    def row(label, key, fmt, scale=1.0, suffix=""):
        a, b = (v if v is None or scale == 1.0 else v * scale for v in (o[key], p[key]))
        cells = ["n/a" if v is None else format(v, fmt) + suffix for v in (a, b)]
        change = "n/a" if a is None or b is None or a == 0 else f"{b / a - 1:+.0%}"
        rows.append(f"| {label} | {cells[0]} | {cells[1]} | {change} |")

    row("Experience Rate", "experiences_per_s", ",.0f", suffix=" exp/s")
    row("Training Throughput", "batches_per_s", ".2f", suffix=" batch/s")
    row("GPU Utilization", "gpu_utilization", ".0f", suffix="%")
    row("Lock Wait Time (collector hand-off per 1k transitions)", "collector_handoff_ms_per_1k_transitions", ".2f", suffix=" ms")
    row("Epoch Time", "epoch_seconds", ".2f", suffix=" s")
    row("Samples trained", "samples_per_s", ",.0f", suffix=" samples/s")
    row("Collector time blocked or waiting", "collector_blocked_fraction", ".2f", scale=100, suffix="%")
    row("Drops (batches)", "drops", ",d")
    row("First epoch vs steady state", "first_epoch_ratio", ".0%")
    row("Replay bytes per transition", "replay_bytes_per_transition", ",d")
    row("Learner RSS at start", "learner_rss_mb_start", ",.0f", suffix=" MB")
    row("Learner RSS at end", "learner_rss_mb_end", ",.0f", suffix=" MB")
    row("Actors' RSS at end (all)", "actors_rss_mb_end", ",.0f", suffix=" MB")
    return "\n".join(rows)
