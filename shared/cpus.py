"""The CPUs this process may use: its affinity (taskset, cpusets), capped by a cgroup CPU quota (a container's
``--cpus``, Compose's ``cpus:``), which the affinity does not show. Pools and thread counts size themselves by it,
so a CPU-limited container does not start one worker per host core."""

from __future__ import annotations

import math
import os

CGROUP_ROOT = "/sys/fs/cgroup"


def usable_cpus(cgroup_root: str = CGROUP_ROOT) -> int:
    """Cores in this process's affinity, at most its cgroup's quota rounded up; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_quota(cgroup_root)
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


def learner_threads(setting: int, local_actors: int) -> int:
    """The learner's torch threads: ``setting``, or at -1 (auto) the usable cores ``local_actors`` leave free (at least 1):
    actors each keep a core busy, and spin-waiting threads beyond the free cores only slow the learner down."""
    return setting if setting > 0 else max(1, usable_cpus() - local_actors)


def cgroup_quota(cgroup_root: str = CGROUP_ROOT) -> float:
    """The cgroup's CPU quota in cores (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); 0: none."""
    v2 = _read(os.path.join(cgroup_root, "cpu.max")).split()
    if len(v2) == 2 and v2[0] != "max":
        return _ratio(v2[0], v2[1])
    v1 = os.path.join(cgroup_root, "cpu")
    if not os.path.isdir(v1):
        v1 = os.path.join(cgroup_root, "cpu,cpuacct")
    return _ratio(_read(os.path.join(v1, "cpu.cfs_quota_us")), _read(os.path.join(v1, "cpu.cfs_period_us")))


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _ratio(quota: str, period: str) -> float:
    """quota / period in cores, 0 when either is missing, not a number, or the quota is off (-1)."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return 0.0
    return q / p if q > 0 and p > 0 else 0.0
