"""What machine a figure came from (CPU model, cores and their topology, native bf16, GPU, torch version): machines
differ about 2x in learner speed, so every run folder keeps its own (``machine.json``)."""

from __future__ import annotations

import contextlib
import json
import os
import platform

import psutil
import torch

from shared.network import cpu_has_native_bf16

MACHINE_NAME = "machine.json"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform module says."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe_machine() -> dict:
    """``cores``: the logical CPUs this process may use, ``cores_total`` all of them, ``physical_cores`` the cores
    behind them and ``threads_per_core`` (2 where SMT pairs share a core), None where the system does not say."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    logical, physical = os.cpu_count(), psutil.cpu_count(logical=False)
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "cores_total": logical,
        "physical_cores": physical,
        "threads_per_core": round(logical / physical) if logical and physical else None,
        "native_bf16": cpu_has_native_bf16(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
    }


def record_machine(run_dir: str) -> None:
    """Write ``machine.json`` into a run folder unless it has one (a resumed run keeps its first machine's)."""
    path = os.path.join(run_dir, MACHINE_NAME)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(describe_machine(), fh, indent=2)
            fh.write("\n")
