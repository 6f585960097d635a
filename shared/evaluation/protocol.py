"""The evaluation protocol: which rows are played on which seed streams, in parallel jobs, summarised and said.

Each row's weights play the same fresh episodes, in jobs of ``EPISODES_PER_JOB`` episodes, job k on its own stream
``stream_seed(seed, k)``, so the episodes do not depend on the core count. Beyond the contenders' own rows the protocol
has its extra rows (``Extra``): the late window, the last weights at a low epsilon, and greedy after no-op starts.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch

from shared.errors import check, is_int
from shared.evaluation.episodes import build_network, episode_record, play_episodes
from shared.evaluation.hazards import format_hazards, hazard_table
from shared.evaluation.result import Row, Summary
from shared.seeding import EVAL_LATE, EVAL_LOW_EPSILON, EVAL_NOOP, stream_seed

CONFIDENCE = 0.95
SELECTION_LEVEL = 0.05
"""Family-wise chance that ``best.pt`` is a snapshot whose mean score is no better than the last weights'."""
EPISODES_PER_JOB = 5  # small enough that a 16-core host gets 20+ jobs from the final evaluation's 100 episodes
Echo = Callable[[str], None]
Words = tuple[str, str]  # the env's words for its score and its success (Mario: distance, flags)
# a row of episodes as ``play_rows`` takes it: (common, weights, episodes, seed, greedy)
Jobs = tuple[dict, list[dict], int, int, bool]


@dataclass(frozen=True)
class Extra:
    """One extra row: ``episodes`` per weights at ``epsilon`` after 0-``noop_max`` no-op steps, on stream ``seed``."""

    key: str  # its name in eval_final.json: late_window, low_epsilon, noop_greedy
    episodes: int
    epsilon: float
    noop_max: int
    seed: int

    @property
    def title(self) -> str:
        """The row in words, after who plays it (``last``, ``random``)."""
        if self.key == "late_window":
            return f"late window at epsilon {self.epsilon:g}"
        return f"at epsilon {self.epsilon:g}" + (f" after 0-{self.noop_max} no-ops" if self.noop_max else "")


def extra_rows(ev: Any, seed: int, late: bool = False, low: int | None = None, noop: int | None = None) -> list[Extra]:
    """The extra rows of evaluation settings ``ev`` (an EvalConfig) that have episodes, on streams of ``seed``: the late
    window when ``late``, then low epsilon and no-op greedy (``low``, ``noop``: their episodes instead of ``ev``'s)."""
    rows = [
        Extra("late_window", ev.late_episodes if late else 0, ev.epsilon, 0, stream_seed(seed, EVAL_LATE)),
        Extra(
            "low_epsilon", ev.low_epsilon_episodes if low is None else low, ev.low_epsilon, 0, stream_seed(seed, EVAL_LOW_EPSILON)
        ),
        Extra("noop_greedy", ev.noop_episodes if noop is None else noop, 0.0, ev.noop_max, stream_seed(seed, EVAL_NOOP)),
    ]
    return [r for r in rows if r.episodes]


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of ``successes`` in ``trials`` (SciPy's), exactly 0 and 1 at the ends; (0, 1)
    without trials."""
    check(is_int(successes) and is_int(trials) and 0 <= successes <= trials, "successes", successes, f"must be in [0, {trials}]")
    if trials == 0:
        return 0.0, 1.0
    from scipy import stats  # here, not at the top: SciPy adds about 0.9 s to every launch.local start

    ci = stats.binomtest(successes, trials).proportion_ci(CONFIDENCE, method="wilson")
    return (0.0 if successes == 0 else float(ci.low)), (1.0 if successes == trials else float(ci.high))


def describe(records: list[dict]) -> Summary:
    """Mean score with a 95% bootstrap interval, success rate with a Wilson interval, mean return and length."""
    from scipy import stats  # here, not at the top: SciPy adds about 0.9 s to every launch.local start

    xs = np.array([r["score"] for r in records], dtype=np.float64)
    successes = int(sum(bool(r["success"]) for r in records))
    x_ci = [float(xs.mean())] * 2  # one episode, or all alike (a deterministic policy): no spread to resample
    if len(xs) > 1 and np.ptp(xs) > 0:
        boot = stats.bootstrap((xs,), np.mean, confidence_level=CONFIDENCE, n_resamples=9999, method="BCa", random_state=0)
        x_ci = [float(boot.confidence_interval.low), float(boot.confidence_interval.high)]
    rate_ci = wilson_interval(successes, len(records))
    return Summary(
        len(records), float(xs.mean()), x_ci, float(np.median(xs)), successes, successes / len(records),
        list(rate_ci), float(np.mean([r["return"] for r in records])),
        float(np.mean([r["length"] for r in records])),
    )  # fmt: skip


def row_of(records: list[dict], clusters: Any, extra: Extra | None = None) -> Row:
    """A row of ``records``: summary, hazards (``clusters``), the episodes, and ``extra``'s stream and settings."""
    row = Row(describe(records), hazard_table(records, clusters), records)
    if extra is not None:
        row.stream_seed, row.epsilon, row.noop_max = extra.seed, extra.epsilon, extra.noop_max
    return row


def choose_best(last: list[float], snapshots: list[list[float]], level: float = SELECTION_LEVEL) -> int | None:
    """The snapshot (by index) that becomes best.pt, or None for the last weights: the highest mean among those above
    ``last``'s in a one-sided Welch t-test at ``level / len(snapshots)`` (without spread: a strictly higher mean)."""
    from scipy import stats

    def better(xs: list[float]) -> bool:
        if np.ptp(xs) == 0 and np.ptp(last) == 0:
            return float(np.mean(xs)) > float(np.mean(last))
        p = stats.ttest_ind(xs, last, equal_var=False, alternative="greater").pvalue
        return bool(np.isfinite(p) and p < level / len(snapshots))

    passed = [i for i, xs in enumerate(snapshots) if better(xs)]
    return max(passed, key=lambda i: float(np.mean(snapshots[i]))) if passed else None


def play_job(job: dict) -> dict:
    """Worker: play ``job['episodes']`` episodes (after up to ``job['noop_max']`` no-ops) and one greedy one if asked."""
    torch.set_num_threads(1)  # batch-1 forwards: one core per worker
    net = build_network(job["env"], job["weights"], job["net"])
    episodes = play_episodes(net, job["env"], job["episodes"], job["epsilon"], job["seed"], noop_max=int(job.get("noop_max", 0)))
    greedy = play_episodes(net, job["env"], 1, 0.0, job["seed"])[0] if job["greedy"] else None
    record = None if greedy is None else episode_record(greedy) | {"actions": greedy.actions.tolist()}
    return {"episodes": [episode_record(e) for e in episodes], "greedy": record}


def episode_jobs(episodes: int, seed: int) -> list[tuple[int, int]]:
    """``(episodes, seed)`` per job: at most ``EPISODES_PER_JOB`` episodes each, job k on ``stream_seed(seed, k)``."""
    check(episodes >= 1, "episodes", episodes, "must be >= 1")
    return [
        (min(EPISODES_PER_JOB, episodes - start), stream_seed(seed, k))
        for k, start in enumerate(range(0, episodes, EPISODES_PER_JOB))
    ]


def play_rows(rows: list[Jobs], processes: int) -> list[list[dict]]:
    """Each row's weights play the same episodes (``episode_jobs``), all rows' jobs in one pool; per row, per weights:
    ``{"episodes": [records in job order], "greedy": the first job's greedy record or None}``."""
    jobs: list[dict] = []
    shapes: list[tuple[int, int]] = []  # per row: its weights, and the jobs of each
    for common, weights, episodes, seed, greedy in rows:
        split = episode_jobs(episodes, seed)
        shapes.append((len(weights), len(split)))
        for w in weights:
            jobs += [dict(common, weights=w, episodes=n, seed=s, greedy=greedy and k == 0) for k, (n, s) in enumerate(split)]
    played = iter(run_jobs(jobs, processes))
    out = []
    for count, n in shapes:
        per_weights = [[next(played) for _ in range(n)] for _ in range(count)]
        out.append([{"episodes": [e for got in w for e in got["episodes"]], "greedy": w[0]["greedy"]} for w in per_weights])
    return out


POOL_ATTEMPTS = 3  # pools in a row that may lose a worker (killed, out of memory) before the jobs left are named


def run_jobs(jobs: list[dict], processes: int, worker: Callable[[dict], dict] = play_job) -> list[dict]:
    """``worker`` (a module-level function; ``play_job``) over ``jobs`` in a spawn pool of ``processes`` workers, results
    in job order. A worker that dies takes its pool with it: the unfinished jobs (seeded, so their episodes are the
    same) go to a fresh pool, up to ``POOL_ATTEMPTS`` pools; then a RuntimeError names them."""
    if processes <= 1 or len(jobs) == 1:
        return [worker(job) for job in jobs]
    results: dict[int, dict] = {}
    for _ in range(POOL_ATTEMPTS):
        with contextlib.suppress(BrokenProcessPool):
            _pool(jobs, [i for i in range(len(jobs)) if i not in results], processes, worker, results)
        if len(results) == len(jobs):
            return [results[i] for i in range(len(jobs))]
    left = [i for i in range(len(jobs)) if i not in results]
    raise RuntimeError(
        f"evaluation jobs {left} of {len(jobs)} lost their worker process in {POOL_ATTEMPTS} pools in a row "
        "(killed, or out of memory?)"
    )


def _pool(jobs: list[dict], todo: list[int], processes: int, worker: Callable, results: dict[int, dict]) -> None:
    """Play ``jobs[todo]`` in one pool into ``results``; BrokenProcessPool when a worker died (those done are kept)."""
    # the workers ignore SIGINT: the launcher decides, and ends the pool on a second Ctrl-C
    spawn, ignore = get_context("spawn"), (signal.SIGINT, signal.SIG_IGN)
    pool = ProcessPoolExecutor(min(processes, len(todo)), mp_context=spawn, initializer=signal.signal, initargs=ignore)
    try:
        futures = {pool.submit(worker, jobs[i]): i for i in todo}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5)  # in slices, so a KeyboardInterrupt is seen here
            for future in sorted(done, key=lambda f: f.exception() is not None):  # keep what finished, then raise
                results[futures[future]] = future.result()
    except BaseException:
        workers = list((pool._processes or {}).values())  # no public way to end busy workers before Python 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            proc.terminate()
        raise
    pool.shutdown(wait=True)


def score_line(s: Summary, what: str, won: str) -> str:
    """A summary in words: mean score with its interval, successes k/n = rate with its interval."""
    return (
        f"{what} mean {s.score_mean:,.1f} [{s.score_ci[0]:,.1f}, {s.score_ci[1]:,.1f}], {won} {s.successes}/"
        f"{s.episodes} = {s.success_rate:.0%} [{s.success_rate_ci[0]:.0%}, {s.success_rate_ci[1]:.0%}] (95% intervals)"
    )


def brief(s: Summary | dict, words: Words) -> str:
    """Mean score and success rate in a few words (a Summary, or an in-training evaluation's dict)."""
    mean, rate = (s.score_mean, s.success_rate) if isinstance(s, Summary) else (s["score_mean"], s["success_rate"])
    return f"{words[0]} {mean:,.1f}, {words[1]} {rate:.0%}"


def say_row(title: str, row: Row, words: Words, echo: Echo) -> None:
    """A row's two lines: ``title: score_line`` and ``title hazards: ...``."""
    echo(f"{title}: {score_line(row.summary, *words)}")
    echo(f"{title} hazards: {format_hazards(row.hazards)}")
