"""The end-of-run evaluation: a ``best.pt`` without a winner's curse, and final figures on fresh episodes.

    python -m launch.final_eval runs/RUN            # what launch.local runs as a run ends (again, or later)

On streams of their own from ``eval.seed`` (docs/architecture.md, "Seeds, final evaluation and reports"): ``best.pt``
is chosen among the last weights and the kept snapshots on fresh episodes (``choose_best``), both then play more fresh
ones, then the late-window, low-epsilon and no-op rows; in jobs of ``EPISODES_PER_JOB`` episodes, each on its own
stream, so the episodes do not depend on the core count.
"""

from __future__ import annotations

import contextlib
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
from learner.checkpoint import CHECKPOINT_NAME, has_checkpoint, load_best, load_checkpoint, load_kept, load_snapshots, save_best
from learner.metrics import MetricsLog
from shared.config import EvalConfig
from shared.config_migration import read_config
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
# a row of episodes as ``play_rows`` takes it: (common, weights, episodes, seed, greedy)
Row = tuple[dict, list[dict], int, int, bool]
Echo = Callable[[str], None]
Words = tuple[str, str]  # the env's words for its score and its success (Mario: distance, flags)


def play_job(job: dict) -> dict:
    """Worker: play ``job['episodes']`` episodes (after up to ``job['noop_max']`` no-ops) and one greedy one if asked."""
    torch.set_num_threads(1)  # batch-1 forwards: one core per worker
    net = build_network(job["env"], job["weights"], job["net"])
    episodes = play_episodes(net, job["env"], job["episodes"], job["epsilon"], job["seed"], noop_max=int(job.get("noop_max", 0)))
    greedy = play_episodes(net, job["env"], 1, 0.0, job["seed"])[0] if job["greedy"] else None
    record = None if greedy is None else episode_record(greedy) | {"actions": greedy.actions.tolist()}
    return {"episodes": [episode_record(e) for e in episodes], "greedy": record}


def describe(records: list[dict]) -> dict:
    """Mean score with a 95% bootstrap interval, success rate with a Wilson interval, mean return and length."""
    from scipy import stats  # here, not at the top: SciPy adds about 0.9 s to every launch.local start

    xs = np.array([r["score"] for r in records], dtype=np.float64)
    successes = int(sum(bool(r["success"]) for r in records))
    x_ci = [float(xs.mean())] * 2  # one episode, or all alike (a deterministic policy): no spread to resample
    if len(xs) > 1 and np.ptp(xs) > 0:
        boot = stats.bootstrap((xs,), np.mean, confidence_level=CONFIDENCE, n_resamples=9999, method="BCa", random_state=0)
        x_ci = [float(boot.confidence_interval.low), float(boot.confidence_interval.high)]
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


def described(records: list[dict], clusters: Any) -> dict:
    """A row's ``summary`` (``describe``) and ``hazards`` (``hazard_table``)."""
    return {"summary": describe(records), "hazards": hazard_table(records, clusters)}


def secondary_row(head: dict, seed: int, records: list[dict], clusters: Any) -> dict:
    """A secondary row (low_epsilon, noop_greedy) of eval_final.json and launch.evaluate's JSON."""
    return head | {"stream_seed": seed} | described(records, clusters) | {"episodes": records}


def _versioned(counters: dict) -> dict:
    return {"weights_version": int(counters["weights_version"]), "env_steps": int(counters["inserted"])}


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


def episode_jobs(episodes: int, seed: int) -> list[tuple[int, int]]:
    """``(episodes, seed)`` per job: at most ``EPISODES_PER_JOB`` episodes each, job k on ``stream_seed(seed, k)``."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be >= 1")
    return [
        (min(EPISODES_PER_JOB, episodes - start), stream_seed(seed, k))
        for k, start in enumerate(range(0, episodes, EPISODES_PER_JOB))
    ]


def play_rows(rows: list[Row], processes: int) -> list[list[dict]]:
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


def score_line(s: dict, what: str, won: str) -> str:
    """A ``describe`` summary in words: mean score with its interval, successes k/n = rate with its interval."""
    return (
        f"{what} mean {s['score_mean']:,.1f} [{s['score_ci'][0]:,.1f}, {s['score_ci'][1]:,.1f}], {won} {s['successes']}/"
        f"{s['episodes']} = {s['success_rate']:.0%} [{s['success_rate_ci'][0]:.0%}, {s['success_rate_ci'][1]:.0%}] "
        "(95% intervals)"
    )


def say_row(title: str, row: dict, words: Words, echo: Echo) -> None:
    """A row's two lines: ``title: score_line`` and ``title hazards: ...``."""
    echo(f"{title}: {score_line(row['summary'], *words)}")
    echo(f"{title} hazards: {format_hazards(row['hazards'])}")


def _brief(s: dict, words: Words) -> str:
    return f"{words[0]} {s['score_mean']:,.1f}, {words[1]} {s['success_rate']:.0%}"


def run_jobs(jobs: list[dict], processes: int) -> list[dict]:
    """``play_job`` over ``jobs`` in a spawn pool of ``processes`` workers, results in job order."""
    if processes <= 1 or len(jobs) == 1:
        return [play_job(job) for job in jobs]
    # the workers ignore SIGINT: the launcher decides, and terminates the pool on a second Ctrl-C
    with spawn_context().Pool(min(processes, len(jobs)), signal.signal, (signal.SIGINT, signal.SIG_IGN)) as pool:
        pending = pool.map_async(play_job, jobs, chunksize=1)
        while not pending.ready():  # wait in slices, so a KeyboardInterrupt is seen here
            pending.wait(0.5)
        return pending.get()


def final_evaluation(run_dir: str, processes: int = 0, echo: Echo = print) -> dict | None:
    """What ``eval_final.json`` holds after choosing and evaluating ``best.pt`` (None: no updates or no final episodes)."""
    checkpoint = load_checkpoint(run_dir, say=echo)
    cfg = resolve_config(read_config(checkpoint["config"]), validate=False)
    ev = cfg.eval
    if ev.final_episodes == 0 or not checkpoint.get("counters", {}).get("updates"):
        return None
    counters, online = checkpoint["counters"], checkpoint["learner"]["online"]
    processes = processes or len(os.sched_getaffinity(0))  # the cores this process may use (taskset, containers)
    env = with_stage(cfg.env, ev.stage)  # as the in-training evaluations play
    started = time.perf_counter()
    entry = entry_for(env)
    words = entry.score.lower(), entry.success.lower()  # the env's words (Mario: distance, flags)
    common = dict(env=env, net=cfg.net, epsilon=ev.epsilon)
    selection, best = select_best(run_dir, checkpoint, ev, common, processes, echo, words)

    seed = stream_seed(ev.seed, EVAL_FINAL)
    contenders = [("last", online, counters)]
    best_is_last = best is not None and best["counters"] is counters
    if best is not None and not best_is_last:  # the last weights as best.pt: their episodes are played once
        contenders.append(("best", best["learner"]["online"], best["counters"]))
    echo(
        f"[FINAL] final evaluation: {', '.join(name for name, *_ in contenders)} weights play {ev.final_episodes} "
        f"fresh episodes each at epsilon {ev.epsilon:g}, and one greedy episode"
    )
    kept = load_kept(run_dir)[-ev.keep_weights :] if ev.keep_weights and ev.late_episodes else []
    more = more_rows(ev, common, online, kept, echo)
    final_row = (common, [weights for _, weights, _ in contenders], ev.final_episodes, seed, True)
    played, *played_more = play_rows([final_row, *more.values()], processes)
    clusters = clusters_for(env)
    result: dict[str, Any] = {"run_dir": run_dir, "seed": cfg.seed, "eval_seed": ev.seed, "stream_seed": seed}
    inserted = int(counters["inserted"])
    result |= {"epsilon": ev.epsilon, "env": env.name, "stage": env_label(env), "env_steps": inserted}
    ratio = counters["samples_trained"] / inserted if inserted and "samples_trained" in counters else None  # replay ratio
    result |= {"updates": int(counters["updates"]), "samples_per_transition": ratio}
    result |= {"wall_seconds": float(counters.get("elapsed_seconds", 0.0)), "selection": selection, "seconds": 0.0}
    for (name, _, c), got in zip(contenders, played):
        result[name] = _versioned(c) | described(got["episodes"], clusters) | {k: got[k] for k in ("greedy", "episodes")}
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
    run_dir: str, checkpoint: dict, ev: EvalConfig, common: dict, processes: int, echo: Echo, words: Words
) -> tuple[list[dict[str, Any]], dict | None]:
    """Step 1 of the module docstring: the selection's rows (the last weights, then each kept snapshot) and the
    checkpoint that is best.pt, written; without kept snapshots no rows and best.pt as training left it (None: none)."""
    snapshots = load_snapshots(run_dir)[: ev.keep_snapshots] if ev.keep_snapshots else []
    if not snapshots:  # no snapshots kept (--eval.keep-snapshots 0): best.pt as training left it, if any
        return [], load_best(run_dir)
    last_weights = {"learner": {"online": checkpoint["learner"]["online"]}} | {k: checkpoint[k] for k in ("counters", "config")}
    echo(
        f"[FINAL] choosing best.pt: the last weights and {len(snapshots)} snapshot(s) play {ev.select_episodes} "
        f"fresh episodes each at epsilon {ev.epsilon:g}; a snapshot replaces the last weights only when its mean "
        f"{words[0]} beats theirs at level {SELECTION_LEVEL:g} (one-sided Welch t-test, Bonferroni)"
    )
    candidates = [last_weights, *snapshots]
    weights = [st["learner"]["online"] for st in candidates]
    (played,) = play_rows([(common, weights, ev.select_episodes, stream_seed(ev.seed, EVAL_SELECT), False)], processes)
    selection: list[dict[str, Any]] = []
    for name, st, got in zip(["last"] + ["snapshot"] * len(snapshots), candidates, played):
        fresh = describe(got["episodes"])
        trained = None if st.get("eval") is None else upgrade(st["eval"])
        during = None if trained is None else {k: trained[k] for k in ("score_mean", "success_rate", "episodes")}
        row = {"weights": name} | _versioned(st["counters"]) | {"in_training": during, "fresh": fresh}
        selection.append(row | {"score": [r["score"] for r in got["episodes"]]})
        said = "" if trained is None else f"in training {_brief(trained, words)}; "
        echo(f"[FINAL]   {name} v{row['weights_version']} ({row['env_steps']:,} env steps): {said}fresh {_brief(fresh, words)}")
    chosen = choose_best(selection[0]["score"], [s["score"] for s in selection[1:]])
    pick = 0 if chosen is None else chosen + 1
    best = candidates[pick]
    best.pop("path", None)
    fresh = selection[pick]["fresh"]
    best["eval"] = {k: fresh[k] for k in ("score_mean", "score_median", "success_rate", "return_mean", "episodes")}
    best["eval"] |= {"epsilon": ev.epsilon, "chosen_from": [s["weights_version"] for s in selection], "chosen": pick}
    save_best(run_dir, best)
    echo(f"[FINAL]   best.pt: {'the last weights' if chosen is None else 'snapshot'} v{selection[pick]['weights_version']}")
    return selection, best


def more_rows(ev: EvalConfig, common: dict, last_online: dict, kept: list[dict], echo: Echo) -> dict[str, Row]:
    """Step 3's rows with episodes (late window, low epsilon, no-op greedy) as ``play_rows`` takes them, said in one line."""
    more: dict[str, Row] = {}
    said = []
    if kept:
        more["late"] = (common, [k["learner"]["online"] for k in kept], ev.late_episodes, stream_seed(ev.seed, EVAL_LATE), False)
        versions = f"v{kept[0]['counters']['weights_version']}-v{kept[-1]['counters']['weights_version']}"
        said.append(
            f"the late window, {len(kept)} kept weights ({versions}), {ev.late_episodes} episodes each at epsilon {ev.epsilon:g}"
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
        weights = [
            _versioned(k["counters"]) | {"summary": describe(got["episodes"]), "episodes": got["episodes"]}
            for k, got in zip(kept, got_more["late"])
        ]
        late = {"epsilon": ev.epsilon, "episodes_per_weights": ev.late_episodes, "stream_seed": stream_seed(ev.seed, EVAL_LATE)}
        late_window = late | {"weights": weights} | described(pooled, clusters)
    secondary = {
        key: secondary_row(head, stream_seed(ev.seed, purpose), got_more[key][0]["episodes"], clusters)
        if key in got_more
        else None
        for key, head, purpose in (
            ("low_epsilon", {"epsilon": ev.low_epsilon}, EVAL_LOW_EPSILON),
            ("noop_greedy", {"noop_max": ev.noop_max}, EVAL_NOOP),
        )
    }
    return {"late_window": late_window, "secondary": secondary}


def say_results(result: dict, names: list[str], best_is_last: bool, words: Words, echo: Echo) -> None:
    """The ``[FINAL]`` lines of the final evaluation's rows (each contender in ``names``, then step 3's)."""
    what, won = words
    for name in names:
        r, g = result[name], result[name]["greedy"]
        head = f"[FINAL] {name:<4} (v{r['weights_version']}, {r['env_steps']:,} env steps): {score_line(r['summary'], what, won)}"
        echo(f"{head}; greedy episode {what} {g['score']:,g}{', success' if g['success'] else ''}")
        echo(f"[FINAL] {name:<4} hazards: {format_hazards(r['hazards'])}")
    if best_is_last:
        echo("[FINAL] best: the last weights (no snapshot beat them on the selection's episodes)")
    late = result["late_window"]
    if late is not None:
        played = f"{len(late['weights'])} kept weights x {late['episodes_per_weights']} episodes at epsilon {late['epsilon']:g}"
        echo(f"[FINAL] late window ({played}): {score_line(late['summary'], what, won)}")
        for w in late["weights"]:
            echo(f"[FINAL]   v{w['weights_version']} ({w['env_steps']:,} env steps): {_brief(w['summary'], words)}")
        echo(f"[FINAL] late window hazards: {format_hazards(late['hazards'])}")
    for key, title in (("low_epsilon", "last at epsilon {epsilon:g}"), ("noop_greedy", "last greedy after 0-{noop_max} no-ops")):
        if (row := result["secondary"][key]) is not None:
            say_row("[FINAL] " + title.format(**row), row, words, echo)
    echo(f"[FINAL] wrote {os.path.join(result['run_dir'], RESULT_NAME)} in {result['seconds']:.0f}s")


def film_greedy(env: Any, actions: list[int], score: float, path: str, name: str, echo: Echo) -> None:
    """Film ``name``'s greedy episode to ``path``; a failure is said, not raised (the figures are already written)."""
    from actors.evaluator import record_video  # imageio: only where an env films

    try:
        info = record_video(env, actions, path, expected_score=score)
    except Exception as exc:  # noqa: BLE001 - ffmpeg, disk, or a replay that differs: the run's results stand
        echo(f"[FINAL] no video: {type(exc).__name__}: {exc}")
        return
    echo(f"[FINAL] video of the greedy episode of {name} (score {score:,g}): {info.path} ({info.frames:,} frames)")


def write_atomic(path: str, text: str, tmp: str = "") -> None:
    """``text`` into ``path``: written whole to ``tmp`` (default: ``path`` + .tmp), then renamed into place."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_results(run_dir: str, result: dict) -> None:
    """``eval_final.json`` (``best`` a copy of ``last`` with ``same_as_last`` when the selection kept it; a row without
    episodes null) and one ``final/`` metrics row at the run's last env step with each row's score and success rate."""
    write_atomic(os.path.join(run_dir, RESULT_NAME), json.dumps(result, indent=2) + "\n")
    secondary = result.get("secondary") or {}
    figures: dict[str, Any] = {}
    rows = {"last": result.get("last"), "best": result.get("best"), "late": result.get("late_window")}
    for name, row in (rows | {"low_epsilon": secondary.get("low_epsilon"), "noop": secondary.get("noop_greedy")}).items():
        if row:
            s = row["summary"]
            figures |= {f"final/{name}_score": s["score_mean"], f"final/{name}_success_rate": s["success_rate"]}
            if name in ("last", "best"):
                figures |= {f"final/{name}_return": s["return_mean"], f"final/{name}_greedy_score": row["greedy"]["score"]}
    with contextlib.closing(MetricsLog(run_dir)) as metrics:
        metrics.write(result["updates"], result["env_steps"], result["wall_seconds"], figures)


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
        if not has_checkpoint(args.run_dir):
            raise UsageError(f"run_dir={args.run_dir!r} has no {CHECKPOINT_NAME}")
        result = final_evaluation(args.run_dir, args.processes)
    except (UsageError, ValueError) as exc:  # ValueError (ConfigError too): no readable checkpoint or config, named
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result is None:
        print(f"[FINAL] nothing to evaluate: no updates in {args.run_dir!r}, or eval.final_episodes 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
