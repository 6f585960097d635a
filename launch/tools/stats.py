"""Small-sample statistics over runs, for launch.tools.report: intervals that have the coverage they claim.

A group is 2-6 runs: a percentile bootstrap over 3 numbers is their range (about 75% coverage, not 95%), while the
Student t interval is exact for normal data and close for the run-to-run spread seen here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05
POWER = 0.8


def t_interval(values: Sequence[float] | ArrayLike, confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """(mean, lo, hi): the Student t interval of the mean (n - 1 dof); one value: lo, hi None; all alike: lo = hi = mean."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("t_interval of no values")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None, None
    se = float(x.std(ddof=1)) / math.sqrt(len(x))
    if se == 0:
        return mean, mean, mean
    lo, hi = stats.t.interval(confidence, len(x) - 1, loc=mean, scale=se)
    return mean, float(lo), float(hi)


@dataclasses.dataclass
class Paired:
    """Per-seed differences A - B over the seeds both sides have, and what they say about the mean difference."""

    seeds: list  # the common seeds, sorted
    a: list[float]
    b: list[float]
    diffs: list[float]  # A - B, per seed
    mean: float | None  # the mean difference (None: no common seed)
    ci: list[float] | None  # its t interval (None: fewer than two seeds)
    se: float | None  # standard error of the mean difference (sd / sqrt(n))
    sd: float | None  # standard deviation of the differences (n - 1)
    positive: int  # seeds where A > B
    negative: int  # seeds where A < B
    ties: int  # seeds where A == B
    only_a: list  # seeds only A has
    only_b: list  # seeds only B has

    @property
    def n(self) -> int:
        return len(self.diffs)


def paired(a: Mapping[Hashable, float], b: Mapping[Hashable, float], confidence: float = CONFIDENCE) -> Paired:
    """The :class:`Paired` comparison of two treatments run on the same seeds (``a``, ``b``: seed -> figure)."""
    common = sorted(set(a) & set(b), key=_order)
    xa, xb = [float(a[s]) for s in common], [float(b[s]) for s in common]
    d = np.asarray(xa, dtype=np.float64) - np.asarray(xb, dtype=np.float64)
    mean = lo = hi = sd = se = None
    if len(d):
        mean, lo, hi = t_interval(d, confidence)
    if len(d) > 1:
        sd = float(d.std(ddof=1))
        se = sd / math.sqrt(len(d))
    ci = None if lo is None or hi is None else [lo, hi]
    signs = int((d > 0).sum()), int((d < 0).sum()), int((d == 0).sum())  # positive, negative, ties
    only = sorted(set(a) - set(b), key=_order), sorted(set(b) - set(a), key=_order)  # only_a, only_b
    return Paired(common, xa, xb, d.tolist(), mean, ci, se, sd, *signs, *only)  # in Paired's field order


def _order(seed: Hashable) -> tuple[int, int, str]:
    """Sort key for seeds: integers in numeric order, then anything else by its text."""
    return (0, seed, "") if isinstance(seed, int) else (1, 0, str(seed))


def _mde(se: float, df: int, alpha: float, power: float) -> float | None:
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se) if df >= 1 else None


def mde_paired(sd_diff: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest mean difference a paired comparison over ``n`` seeds detects with probability ``power`` at
    two-sided ``alpha``: (t_{1-alpha/2,n-1} + t_{power,n-1}) x sd_diff / sqrt(n). None for fewer than two seeds."""
    return _mde(sd_diff / math.sqrt(n), n - 1, alpha, power) if n >= 1 else None


def mde_two_groups(sd: float, n1: int, n2: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The same for two unpaired groups of ``n1`` and ``n2`` runs and the pooled SD of one run's figure:
    (t_{1-alpha/2,df} + t_{power,df}) x sd x sqrt(1/n1 + 1/n2), df = n1 + n2 - 2. None without a degree of freedom."""
    return _mde(sd * math.sqrt(1 / n1 + 1 / n2), n1 + n2 - 2, alpha, power) if n1 >= 1 and n2 >= 1 else None


def pooled_sd(samples: Sequence[Sequence[float]]) -> float | None:
    """The pooled SD of groups of runs, sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)); None when no group has two runs."""
    dof = sum(len(s) - 1 for s in samples if len(s) > 1)
    if dof == 0:
        return None
    ss = sum(float(np.var(np.asarray(s, dtype=np.float64), ddof=1)) * (len(s) - 1) for s in samples if len(s) > 1)
    return math.sqrt(ss / dof)
