"""The end-of-run evaluation: a ``best.pt`` without a winner's curse, and final figures on fresh episodes.

    python -m launch.final_eval runs/RUN            # what launch.local runs as a run ends (again, or later)

An in-training evaluation is 10 noisy episodes; ``best.pt`` as the maximum of many of them is biased
upwards (the winner's curse). So at the end of a run:

1. **Selection.** The last weights and the kept snapshots (``eval.keep_snapshots`` best in-training scores,
   ``snapshots/``) each play the same ``eval.select_episodes`` episodes at ``eval.epsilon`` on a stream no
   in-training evaluation used. ``best.pt`` is the last weights unless a snapshot's mean score beats theirs in a
   one-sided Welch t-test at level ``SELECTION_LEVEL`` / (number of snapshots) (Bonferroni): then the snapshot
   with the highest mean among those that pass (``choose_best``). So best.pt is an earlier snapshot no better than
   the last weights in at most 5% of runs; at 30 episodes each and Mario's spread of about 800 x_pos per episode,
   a snapshot 700 x_pos better is found 88% of the time (500 better: 60%). Its ``eval`` is the fresh score.
2. **Final evaluation.** The last weights (``checkpoint.pt``) and ``best.pt`` each play ``eval.final_episodes``
   episodes at ``eval.epsilon`` on a third stream, the same episodes for both, plus one greedy episode (epsilon 0).
   The selection's episodes are not reused, so these figures are unbiased estimates for each.
3. **More rows, on streams of their own** (played in the same pool as step 2): the late window, each kept weights
   (``kept/``, the last ``eval.keep_weights`` broadcasts) ``eval.late_episodes`` episodes at ``eval.epsilon``, the
   same episodes for each, pooled (one lucky or unlucky last broadcast does not decide a run); the last weights at
   ``eval.low_epsilon`` (``eval.low_epsilon_episodes``) and greedy after 0-``eval.noop_max`` no-op steps
   (``eval.noop_episodes``, DQN Zoo's protocol). Every row of episodes has a hazard table (shared/hazards.py: each
   hazard cluster's pass rate where the env names clusters, as on Mario 1-1, else a histogram of where episodes end).

Seeds come from the run's ``eval.seed`` (shared/seeding.py). Each weights' episodes go out in jobs of
``EPISODES_PER_JOB``, job k on its own stream (``stream_seed(purpose's seed, k)``), played in parallel worker
processes, one per core, so a many-core host keeps all its cores busy (one job per weights kept 2-3 of them busy);
the split is fixed, so the episodes are the same on every machine (``--processes`` changes only the time).
Results: ``eval_final.json`` (layout in ``write_results``), one ``final/`` row in ``metrics.jsonl`` and
TensorBoard at the run's last env step, ``[FINAL]`` lines on the console, and on Mario ``best.mp4``, best.pt's greedy
episode. A second Ctrl-C stops it; the
run's checkpoint and snapshots are untouched, so it can be run again later.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import torch
import tyro

from actors.evaluator import build_network, episode_record, play_episodes
from launch.cli import UsageError, parse
from launch.processes import spawn_context
from learner.checkpoint import (
    CHECKPOINT_NAME,
    has_checkpoint,
    load_best,
    load_checkpoint,
    load_kept,
    load_snapshots,
    save_best,
)
from learner.metrics import MetricsLog
from shared.config import ConfigError, EvalConfig, RunConfig
from shared.envs import entry_for, env_label, with_stage
from shared.hazards import clusters_for, format_hazards, hazard_table
from shared.resolution import resolve_config
from shared.results import upgrade
from shared.seeding import EVAL_FINAL, EVAL_LATE, EVAL_LOW_EPSILON, EVAL_NOOP, EVAL_SELECT, stream_seed

RESULT_NAME = "eval_final.json"
VIDEO_NAME = "best.mp4"  # best.pt's greedy episode, on envs that film (Mario)
CONFIDENCE = 0.95
SELECTION_LEVEL = 0.05
"""Family-wise chance that ``best.pt`` is a snapshot whose mean score is no better than the last weights'."""
EPISODES_PER_JOB = 5  # small enough that a 16-core host gets 20+ jobs from the final evaluation's 100 episodes


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides; it terminates the pool on a second Ctrl-C


def play_job(job: dict) -> dict:
    """Worker: play ``job['episodes']`` episodes (and one greedy one if asked) with the given weights, each after
    up to ``job['noop_max']`` no-op steps where the job has it."""
    torch.set_num_threads(1)  # batch-1 forwards: one core per worker
    net = build_network(job["env"], job["weights"], dueling=job["dueling"])
    episodes = play_episodes(net, job["env"], job["episodes"], job["epsilon"], job["seed"], noop_max=int(job.get("noop_max", 0)))
    greedy = play_episodes(net, job["env"], 1, 0.0, job["seed"])[0] if job["greedy"] else None
    return {
        "episodes": [episode_record(e) for e in episodes],
        "greedy": None if greedy is None else episode_record(greedy) | {"actions": greedy.actions.tolist()},
    }


def describe(records: list[dict]) -> dict:
    """Mean score with a 95% bootstrap interval, success rate with a Wilson interval, mean return and length."""
    from scipy import stats  # here, not at the top: SciPy adds about 0.9 s to every launch.local start

    xs = np.array([r["score"] for r in records], dtype=np.float64)
    successes = int(sum(bool(r["success"]) for r in records))
    if len(xs) > 1 and np.ptp(xs) > 0:
        ci = stats.bootstrap(
            (xs,), np.mean, confidence_level=CONFIDENCE, n_resamples=9999, method="BCa", random_state=0
        ).confidence_interval
        x_ci = [float(ci.low), float(ci.high)]
    else:  # one episode, or all alike (a deterministic policy): no spread to resample
        x_ci = [float(xs.mean()), float(xs.mean())]
    rate_ci = stats.binomtest(successes, len(records)).proportion_ci(CONFIDENCE, method="wilson")
    return {
        "episodes": len(records),
        "score_mean": float(xs.mean()),
        "score_ci": x_ci,
        "score_median": float(np.median(xs)),
        "successes": successes,
        "success_rate": successes / len(records),
        "success_rate_ci": [float(rate_ci.low), float(rate_ci.high)],
        "return_mean": float(np.mean([r["return"] for r in records])),
        "length_mean": float(np.mean([r["length"] for r in records])),
    }


def choose_best(last: list[float], snapshots: list[list[float]], level: float = SELECTION_LEVEL) -> int | None:
    """The snapshot that becomes best.pt, by index, or None for the last weights: among the snapshots whose scores
    (one per fresh episode) have a mean above ``last``'s in a one-sided Welch t-test at ``level / len(snapshots)``,
    the one with the highest mean. Samples without spread (a deterministic env) pass only on a strictly higher
    mean with no spread on either side."""
    from scipy import stats

    if not snapshots:
        return None
    passed = []
    for i, xs in enumerate(snapshots):
        if np.ptp(xs) == 0 and np.ptp(last) == 0:
            better = float(np.mean(xs)) > float(np.mean(last))
        else:
            p = stats.ttest_ind(xs, last, equal_var=False, alternative="greater").pvalue
            better = bool(np.isfinite(p) and p < level / len(snapshots))
        if better:
            passed.append(i)
    return max(passed, key=lambda i: float(np.mean(snapshots[i]))) if passed else None


def samples_per_transition(counters: dict) -> float | None:
    """The run's replay ratio: samples trained per transition inserted (None where the counters lack it)."""
    inserted = int(counters.get("inserted", 0))
    return counters["samples_trained"] / inserted if inserted and "samples_trained" in counters else None


def episode_jobs(episodes: int, seed: int) -> list[tuple[int, int]]:
    """``(episodes, seed)`` of each job that plays ``episodes`` episodes on the stream ``seed``: jobs of at most
    ``EPISODES_PER_JOB`` episodes, job k seeded ``stream_seed(seed, k)``. Depends on nothing but its arguments."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be >= 1")
    return [
        (min(EPISODES_PER_JOB, episodes - start), stream_seed(seed, k))
        for k, start in enumerate(range(0, episodes, EPISODES_PER_JOB))
    ]


def play_weights(common: dict, weights: list[dict], episodes: int, seed: int, greedy: bool, processes: int) -> list[dict]:
    """Each of ``weights`` plays the same ``episodes`` episodes (``episode_jobs(episodes, seed)``), all jobs in one
    pool; per weights, in order: ``{"episodes": [records in job order], "greedy": record of the first job's greedy
    episode or None}``. ``common``: the jobs' env, dueling and epsilon (and noop_max, for no-op starts)."""
    return play_rows([(common, weights, episodes, seed, greedy)], processes)[0]


def play_rows(rows: list[tuple[dict, list[dict], int, int, bool]], processes: int) -> list[list[dict]]:
    """``play_weights`` for several rows ``(common, weights, episodes, seed, greedy)`` at once, all their jobs in one
    pool (the cores stay busy to the end of the longest row); per row, what ``play_weights`` returns."""
    jobs: list[dict] = []
    slices: list[tuple[int, int]] = []
    for common, weights, episodes, seed, greedy in rows:
        split = episode_jobs(episodes, seed)
        for w in weights:
            slices.append((len(jobs), len(split)))
            jobs += [dict(common, weights=w, episodes=n, seed=s, greedy=greedy and k == 0) for k, (n, s) in enumerate(split)]
    played = run_jobs(jobs, processes)
    per_weights = [
        {"episodes": [e for got in played[i : i + n] for e in got["episodes"]], "greedy": played[i]["greedy"]} for i, n in slices
    ]
    out, at = [], 0
    for _, weights, *_ in rows:
        out.append(per_weights[at : at + len(weights)])
        at += len(weights)
    return out


def score_line(s: dict, what: str, won: str) -> str:
    """A ``describe`` summary in words: mean score with its interval, successes k/n = rate with its interval."""
    return (
        f"{what} mean {s['score_mean']:,.1f} [{s['score_ci'][0]:,.1f}, {s['score_ci'][1]:,.1f}], {won} {s['successes']}/"
        f"{s['episodes']} = {s['success_rate']:.0%} [{s['success_rate_ci'][0]:.0%}, {s['success_rate_ci'][1]:.0%}] "
        "(95% intervals)"
    )


def run_jobs(jobs: list[dict], processes: int) -> list[dict]:
    """``play_job`` over ``jobs`` in a spawn pool of ``processes`` workers, results in job order."""
    if processes <= 1 or len(jobs) == 1:
        return [play_job(job) for job in jobs]
    with spawn_context().Pool(min(processes, len(jobs)), initializer=_ignore_sigint) as pool:
        pending = pool.map_async(play_job, jobs, chunksize=1)
        while not pending.ready():  # wait in slices, so a KeyboardInterrupt is seen here
            pending.wait(0.5)
        return pending.get()


def final_evaluation(run_dir: str, processes: int = 0, echo: Callable[[str], None] = print) -> dict | None:
    """Select ``best.pt`` among the run's snapshots, then evaluate it and the last weights (module docstring).
    Returns what ``eval_final.json`` holds, or None when the run has no trained checkpoint or
    ``eval.final_episodes`` is 0."""
    checkpoint = load_checkpoint(run_dir, say=echo)
    cfg = resolve_config(RunConfig.from_json(checkpoint["config"]), validate=False)
    ev = cfg.eval
    if ev.final_episodes == 0 or not checkpoint.get("counters", {}).get("updates"):
        return None
    processes = processes or len(os.sched_getaffinity(0))  # the cores this process may use (taskset, containers)
    env = with_stage(cfg.env, ev.stage)  # as the in-training evaluations play
    started = time.perf_counter()
    entry = entry_for(env)
    words = entry.score.lower(), entry.success.lower()  # the env's words (Mario: distance, flags)
    common = dict(env=env, dueling=cfg.net.dueling, epsilon=ev.epsilon)
    selection, best = select_best(run_dir, checkpoint, ev, common, processes, echo, words)

    seed = stream_seed(ev.seed, EVAL_FINAL)
    contenders = [("last", checkpoint["learner"]["online"], checkpoint["counters"])]
    best_is_last = best is not None and best["counters"] is checkpoint["counters"]
    if best is not None and not best_is_last:  # the last weights as best.pt: their episodes are played once
        contenders.append(("best", best["learner"]["online"], best["counters"]))
    echo(
        f"[FINAL] final evaluation: {', '.join(name for name, *_ in contenders)} weights play {ev.final_episodes} "
        f"fresh episodes each at epsilon {ev.epsilon:g}, and one greedy episode"
    )
    kept = load_kept(run_dir)[-ev.keep_weights :] if ev.keep_weights and ev.late_episodes else []
    more = more_rows(ev, common, checkpoint["learner"]["online"], kept, echo)
    final_row = (common, [weights for _, weights, _ in contenders], ev.final_episodes, seed, True)
    played, *played_more = play_rows([final_row, *more.values()], processes)
    clusters = clusters_for(env)
    result: dict[str, Any] = {
        "run_dir": run_dir,
        "seed": cfg.seed,
        "eval_seed": ev.seed,
        "stream_seed": seed,
        "epsilon": ev.epsilon,
        "env": env.name,
        "stage": env_label(env),
        "env_steps": int(checkpoint["counters"]["inserted"]),
        "updates": int(checkpoint["counters"]["updates"]),
        "samples_per_transition": samples_per_transition(checkpoint["counters"]),
        "wall_seconds": float(checkpoint["counters"].get("elapsed_seconds", 0.0)),
        "selection": selection,
        "seconds": 0.0,
    }
    for (name, _, counters), got in zip(contenders, played):
        result[name] = {
            "weights_version": int(counters["weights_version"]),
            "env_steps": int(counters["inserted"]),
            "summary": describe(got["episodes"]),
            "hazards": hazard_table(got["episodes"], clusters),
            "greedy": got["greedy"],
            "episodes": got["episodes"],
        }
    result.setdefault("best", dict(result["last"], same_as_last=True) if best_is_last else None)
    result.update(more_results(ev, kept, dict(zip(more, played_more)), clusters))
    filmed_name = "best.pt" if result["best"] else "the last weights"
    filmed = dict((result["best"] or result["last"])["greedy"])
    for name in ("last", "best"):  # the greedy episodes' actions: filmed below, not kept in the JSON
        if result[name]:
            result[name]["greedy"].pop("actions", None)
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_results(run_dir, result)
    say_results(result, [name for name, *_ in contenders], best_is_last, words, echo)
    if entry.video:
        film_greedy(env, filmed["actions"], filmed["score"], os.path.join(run_dir, VIDEO_NAME), filmed_name, echo)
    return result


def select_best(
    run_dir: str,
    checkpoint: dict,
    ev: EvalConfig,
    common: dict,
    processes: int,
    echo: Callable[[str], None],
    words: tuple[str, str],
) -> tuple[list[dict[str, Any]], dict | None]:
    """Step 1 of the module docstring: the selection's rows (the last weights, then each kept snapshot) and the
    checkpoint that is best.pt, written; without kept snapshots no rows and best.pt as training left it (None: none)."""
    what, won = words
    snapshots = load_snapshots(run_dir)[: ev.keep_snapshots] if ev.keep_snapshots else []
    if not snapshots:  # no snapshots kept (--eval.keep-snapshots 0): best.pt as training left it, if any
        return [], load_best(run_dir)
    last_weights = {
        "learner": {"online": checkpoint["learner"]["online"]},
        "counters": checkpoint["counters"],
        "config": checkpoint["config"],
    }
    echo(
        f"[FINAL] choosing best.pt: the last weights and {len(snapshots)} snapshot(s) play {ev.select_episodes} "
        f"fresh episodes each at epsilon {ev.epsilon:g}; a snapshot replaces the last weights only when its mean "
        f"{what} beats theirs at level {SELECTION_LEVEL:g} (one-sided Welch t-test, Bonferroni)"
    )
    played = play_weights(
        common,
        [last_weights["learner"]["online"]] + [st["learner"]["online"] for st in snapshots],
        ev.select_episodes,
        stream_seed(ev.seed, EVAL_SELECT),
        greedy=False,
        processes=processes,
    )
    selection: list[dict[str, Any]] = []
    for name, st, got in zip(["last"] + ["snapshot"] * len(snapshots), [last_weights, *snapshots], played):
        fresh = describe(got["episodes"])
        trained = None if st.get("eval") is None else upgrade(st["eval"])
        selection.append(
            {
                "weights": name,
                "weights_version": int(st["counters"]["weights_version"]),
                "env_steps": int(st["counters"]["inserted"]),
                "in_training": None
                if trained is None
                else {
                    "score_mean": trained["score_mean"],
                    "success_rate": trained["success_rate"],
                    "episodes": trained["episodes"],
                },
                "fresh": fresh,
                "score": [r["score"] for r in got["episodes"]],
            }
        )
        during = (
            "" if trained is None else f"in training {what} {trained['score_mean']:,.1f}, {won} {trained['success_rate']:.0%}; "
        )
        echo(
            f"[FINAL]   {name} v{selection[-1]['weights_version']} ({selection[-1]['env_steps']:,} env steps): "
            f"{during}fresh {what} {fresh['score_mean']:,.1f}, {won} {fresh['success_rate']:.0%}"
        )
    chosen = choose_best(selection[0]["score"], [s["score"] for s in selection[1:]])
    pick = 0 if chosen is None else chosen + 1
    best = last_weights if chosen is None else snapshots[chosen]
    best.pop("path", None)
    best["eval"] = {
        k: selection[pick]["fresh"][k] for k in ("score_mean", "score_median", "success_rate", "return_mean", "episodes")
    } | {"epsilon": ev.epsilon, "chosen_from": [s["weights_version"] for s in selection], "chosen": pick}
    save_best(run_dir, best)
    echo(f"[FINAL]   best.pt: {'the last weights' if chosen is None else 'snapshot'} v{selection[pick]['weights_version']}")
    return selection, best


def more_rows(
    ev: EvalConfig, common: dict, last_online: dict, kept: list[dict], echo: Callable[[str], None]
) -> dict[str, tuple[dict, list[dict], int, int, bool]]:
    """Step 3's rows (the late window, low epsilon, no-op greedy: those with episodes), as ``play_rows`` takes them,
    each on its own stream; said in one line."""
    more: dict[str, tuple[dict, list[dict], int, int, bool]] = {}
    said = []
    if kept:
        more["late"] = (common, [k["learner"]["online"] for k in kept], ev.late_episodes, stream_seed(ev.seed, EVAL_LATE), False)
        said.append(
            f"the late window, {len(kept)} kept weights (v{kept[0]['counters']['weights_version']}-"
            f"v{kept[-1]['counters']['weights_version']}), {ev.late_episodes} episodes each at epsilon {ev.epsilon:g}"
        )
    if ev.low_epsilon_episodes:
        low = dict(common, epsilon=ev.low_epsilon)
        more["low_epsilon"] = (low, [last_online], ev.low_epsilon_episodes, stream_seed(ev.seed, EVAL_LOW_EPSILON), False)
        said.append(f"the last weights {ev.low_epsilon_episodes} episodes at epsilon {ev.low_epsilon:g}")
    if ev.noop_episodes:
        noop = dict(common, epsilon=0.0, noop_max=ev.noop_max)
        more["noop_greedy"] = (noop, [last_online], ev.noop_episodes, stream_seed(ev.seed, EVAL_NOOP), False)
        said.append(f"{ev.noop_episodes} greedy episodes after 0-{ev.noop_max} no-op steps")
    if said:
        echo(f"[FINAL] and on streams of their own: {'; '.join(said)}")
    return more


def more_results(ev: EvalConfig, kept: list[dict], got_more: dict[str, list[dict]], clusters: Any) -> dict[str, Any]:
    """``late_window`` and ``secondary`` of ``eval_final.json`` from step 3's played rows (``write_results``)."""
    late_window = None
    if "late" in got_more:
        pooled = [e for got in got_more["late"] for e in got["episodes"]]
        late_window = {
            "epsilon": ev.epsilon,
            "episodes_per_weights": ev.late_episodes,
            "stream_seed": stream_seed(ev.seed, EVAL_LATE),
            "weights": [
                {
                    "weights_version": int(k["counters"]["weights_version"]),
                    "env_steps": int(k["counters"]["inserted"]),
                    "summary": describe(got["episodes"]),
                    "episodes": got["episodes"],
                }
                for k, got in zip(kept, got_more["late"])
            ],
            "summary": describe(pooled),
            "hazards": hazard_table(pooled, clusters),
        }
    secondary = {
        key: None
        if key not in got_more
        else head
        | {
            "stream_seed": stream_seed(ev.seed, purpose),
            "summary": describe(got_more[key][0]["episodes"]),
            "hazards": hazard_table(got_more[key][0]["episodes"], clusters),
            "episodes": got_more[key][0]["episodes"],
        }
        for key, head, purpose in (
            ("low_epsilon", {"epsilon": ev.low_epsilon}, EVAL_LOW_EPSILON),
            ("noop_greedy", {"noop_max": ev.noop_max}, EVAL_NOOP),
        )
    }
    return {"late_window": late_window, "secondary": secondary}


def say_results(result: dict, names: list[str], best_is_last: bool, words: tuple[str, str], echo: Callable[[str], None]) -> None:
    """The ``[FINAL]`` lines of the final evaluation's rows (each contender in ``names``, then step 3's)."""
    what, won = words
    for name in names:
        r = result[name]
        s, g = r["summary"], r["greedy"]
        echo(
            f"[FINAL] {name:<4} (v{r['weights_version']}, {r['env_steps']:,} env steps): {score_line(s, what, won)}; "
            f"greedy episode {what} {g['score']:,g}{', success' if g['success'] else ''}"
        )
        echo(f"[FINAL] {name:<4} hazards: {format_hazards(r['hazards'])}")
    if best_is_last:
        echo("[FINAL] best: the last weights (no snapshot beat them on the selection's episodes)")
    late = result["late_window"]
    if late is not None:
        echo(
            f"[FINAL] late window ({len(late['weights'])} kept weights x {late['episodes_per_weights']} episodes at "
            f"epsilon {late['epsilon']:g}): {score_line(late['summary'], what, won)}"
        )
        for w in late["weights"]:
            echo(
                f"[FINAL]   v{w['weights_version']} ({w['env_steps']:,} env steps): {what} "
                f"{w['summary']['score_mean']:,.1f}, {won} {w['summary']['success_rate']:.0%}"
            )
        echo(f"[FINAL] late window hazards: {format_hazards(late['hazards'])}")
    low, noop = result["secondary"]["low_epsilon"], result["secondary"]["noop_greedy"]
    if low is not None:
        echo(f"[FINAL] last at epsilon {low['epsilon']:g}: {score_line(low['summary'], what, won)}")
        echo(f"[FINAL] last at epsilon {low['epsilon']:g} hazards: {format_hazards(low['hazards'])}")
    if noop is not None:
        echo(f"[FINAL] last greedy after 0-{noop['noop_max']} no-ops: {score_line(noop['summary'], what, won)}")
        echo(f"[FINAL] last greedy after 0-{noop['noop_max']} no-ops hazards: {format_hazards(noop['hazards'])}")
    echo(f"[FINAL] wrote {os.path.join(result['run_dir'], RESULT_NAME)} in {result['seconds']:.0f}s")


def film_greedy(env: Any, actions: list[int], score: float, path: str, name: str, echo: Callable[[str], None]) -> None:
    """Film the greedy episode of ``name``'s weights (best.pt, else the last weights) to ``path``; a failure is said,
    not raised: the figures are already written."""
    from actors.evaluator import record_video  # imageio: only where an env films

    try:
        info = record_video(env, actions, path, expected_score=score)
    except Exception as exc:  # noqa: BLE001 - ffmpeg, disk, or a replay that differs: the run's results stand
        echo(f"[FINAL] no video: {type(exc).__name__}: {exc}")
        return
    echo(f"[FINAL] video of the greedy episode of {name} (score {score:,g}): {info.path} ({info.frames:,} frames)")


def write_results(run_dir: str, result: dict) -> None:
    """``eval_final.json`` (run_dir, seed, eval_seed, stream_seed, epsilon, env, stage, env_steps, updates,
    samples_per_transition (the run's replay ratio), wall_seconds,
    selection: the last weights first, then each snapshot, with its in-training score (none for the last weights),
    fresh score and per-episode scores; last and best: weights_version, env_steps, summary (``describe``), hazards
    (``hazard_table``), greedy and episodes (score, success, return, length each); best is a copy of last with
    ``same_as_last`` when the selection kept the last weights, null when there was nothing to choose from;
    late_window: epsilon, episodes_per_weights, stream_seed, weights (per kept weights, oldest first: weights_version,
    env_steps, summary, episodes), summary and hazards of all their episodes pooled, null without kept weights or
    late episodes; secondary: low_epsilon (epsilon, stream_seed, summary, hazards, episodes) and noop_greedy (noop_max,
    stream_seed, summary, hazards, episodes: each with its noops), each null at 0 episodes), and
    one ``final/`` metrics row at the run's last env step (last_/best_ score, success_rate, return, greedy_score;
    late_, low_epsilon_, noop_ score and success_rate where those rows exist)."""
    path = os.path.join(run_dir, RESULT_NAME)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
    os.replace(path + ".tmp", path)
    figures = {}
    for name in ("last", "best"):
        if result.get(name):
            s = result[name]["summary"]
            figures.update(
                {
                    f"final/{name}_score": s["score_mean"],
                    f"final/{name}_success_rate": s["success_rate"],
                    f"final/{name}_return": s["return_mean"],
                    f"final/{name}_greedy_score": result[name]["greedy"]["score"],
                }
            )
    secondary = result.get("secondary") or {}
    for name, row in (
        ("late", result.get("late_window")),
        ("low_epsilon", secondary.get("low_epsilon")),
        ("noop", secondary.get("noop_greedy")),
    ):
        if row:
            figures.update(
                {
                    f"final/{name}_score": row["summary"]["score_mean"],
                    f"final/{name}_success_rate": row["summary"]["success_rate"],
                }
            )
    metrics = MetricsLog(run_dir)
    try:
        metrics.write(result["updates"], result["env_steps"], result["wall_seconds"], figures)
    finally:
        metrics.close()


@dataclasses.dataclass
class FinalEvalArgs:
    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """A run folder made by launch.local."""
    processes: int = 0
    """Worker processes that play the episodes (0: one per core this process may use)."""


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(FinalEvalArgs, argv, "python -m launch.final_eval", __doc__.split("\n")[0])
        if args.processes < 0:
            raise UsageError(f"--processes={args.processes} must be >= 0 (0: one per core)")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not has_checkpoint(args.run_dir):
        print(f"error: run_dir={args.run_dir!r} has no {CHECKPOINT_NAME}", file=sys.stderr)
        return 2
    try:
        result = final_evaluation(args.run_dir, args.processes)
    except (ConfigError, ValueError) as exc:  # ValueError: no readable checkpoint, each file's fault named
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result is None:
        print(f"[FINAL] nothing to evaluate: no updates in {args.run_dir!r}, or eval.final_episodes 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
