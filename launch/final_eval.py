"""The end-of-run evaluation: a ``best.pt`` without a winner's curse, and final figures on fresh episodes.

    python -m launch.final_eval runs/RUN            # what launch.local runs as a run ends (again, or later)

On streams of their own from ``eval.seed`` (docs/architecture.md, "Seeds, final evaluation and reports"): ``best.pt``
is chosen among the last weights and the kept snapshots on fresh episodes (``choose_best``), both then play more fresh
ones, then the late-window, low-epsilon and no-op rows; in jobs of ``EPISODES_PER_JOB`` episodes, each on its own
stream, so the episodes do not depend on the core count. With ``eval.drill_trials`` the last weights then drill each
hazard from a saved state before it (shared/evaluation/drills.py), one job per point and variant.

A result the disk refuses (``eval_final.json``, ``best.pt``, ``best.mp4``, the ``final/`` metrics row) is said with its
file and error while the evaluation goes on; the program then exits ``EXIT_UNWRITTEN`` (5) with a line naming them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import Annotated, Any

import tyro

from launch.cli import UsageError, parse
from launch.exits import EXIT_UNWRITTEN
from learner.checkpoint import (
    BEST_NAME,
    CHECKPOINT_NAME,
    has_checkpoint,
    load_best,
    load_checkpoint,
    load_kept,
    load_snapshots,
    save_best,
)
from learner.metrics import METRICS_NAME, MetricsLog
from shared.config import EvalConfig
from shared.config_migration import read_config
from shared.cpus import usable_cpus
from shared.envs import entry_for, env_label, with_stage
from shared.evaluation.drills import format_drills, play_drills
from shared.evaluation.hazards import clusters_for, format_hazards
from shared.evaluation.names import upgrade
from shared.evaluation.protocol import (
    SELECTION_LEVEL,
    Echo,
    Extra,
    Jobs,
    Words,
    brief,
    choose_best,
    describe,
    extra_rows,
    play_rows,
    row_of,
    say_row,
    score_line,
)  # fmt: skip
from shared.evaluation.result import RESULT_NAME, Candidate, Drills, FinalResult, KeptWeights, LateWindow, WeightsRow
from shared.resolution import resolve_config
from shared.seeding import EVAL_DRILLS, EVAL_FINAL, EVAL_SELECT, stream_seed
from shared.writes import RefusedWrites, write_atomic

VIDEO_NAME = "best.mp4"  # best.pt's greedy episode, on envs that film (Mario)


def _versioned(counters: dict) -> dict:
    return {"weights_version": int(counters["weights_version"]), "env_steps": int(counters["inserted"])}


def result_writes(echo: Echo) -> RefusedWrites:
    """Where the final evaluation's writes a disk refuses are said and counted (``unwritten_line`` names them)."""
    return RefusedWrites(echo, "[FINAL]", "the evaluation goes on")


def unwritten_line(run_dir: str, refused: RefusedWrites) -> str:
    """The error line for results ``refused`` counts as not written ('' when all were), with how to write them later."""
    if not refused.counts:
        return ""
    return (
        f"error: the final evaluation could not write {', '.join(refused.counts)} (see above; exit {EXIT_UNWRITTEN}); the "
        f"training is saved: python -m launch.final_eval {run_dir} writes them once there is room"
    )


def final_evaluation(
    run_dir: str, processes: int = 0, echo: Echo = print, refused: RefusedWrites | None = None
) -> FinalResult | None:
    """Choose and evaluate ``best.pt``, play the extra rows, write ``eval_final.json`` (None: no updates or no final
    episodes). A write the disk refuses is said and counted in ``refused`` (default: ``result_writes(echo)``)."""
    refused = refused if refused is not None else result_writes(echo)
    checkpoint = load_checkpoint(run_dir, say=echo)
    cfg = resolve_config(read_config(checkpoint["config"]), validate=False)
    ev = cfg.eval
    if ev.final_episodes == 0 or not checkpoint.get("counters", {}).get("updates"):
        return None
    counters, online = checkpoint["counters"], checkpoint["learner"]["online"]
    processes = processes or usable_cpus()  # the cores this process may use (taskset, a container's CPU quota)
    env = with_stage(cfg.env, ev.stage)  # as the in-training evaluations play
    started = time.perf_counter()
    entry = entry_for(env)
    words = entry.score.lower(), entry.success.lower()  # the env's words (Mario: distance, flags)
    common = dict(env=env, net=cfg.net, epsilon=ev.epsilon)
    selection, best = select_best(run_dir, checkpoint, ev, common, processes, echo, words, refused)

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
    extras = extra_rows(ev, ev.seed, late=bool(kept))
    say_plan(extras, kept, echo)
    played, *played_extra = play_rows(
        [(common, [weights for _, weights, _ in contenders], ev.final_episodes, seed, True)]
        + [extra_jobs(x, common, online, kept) for x in extras],
        processes,
    )
    clusters = clusters_for(env)
    rows = {}
    for (name, _, c), got in zip(contenders, played):
        row = vars(row_of(got["episodes"], clusters)) | {"stream_seed": seed, "epsilon": ev.epsilon}
        rows[name] = WeightsRow(**row, greedy=got["greedy"], **_versioned(c))
    if best_is_last:
        rows["best"] = dataclasses.replace(rows["last"], same_as_last=True)
    inserted = int(counters["inserted"])
    result = FinalResult(
        run_dir, cfg.seed, ev.seed, seed, ev.epsilon, env.name, env_label(env), inserted, int(counters["updates"]),
        wall_seconds=float(counters.get("elapsed_seconds", 0.0)), last=rows["last"], best=rows.get("best"),
        samples_per_transition=counters["samples_trained"] / inserted if inserted and "samples_trained" in counters else None,
        selection=selection,
    )  # fmt: skip
    for x, per_weights in zip(extras, played_extra):
        pooled = row_of([e for w in per_weights for e in w["episodes"]], clusters, x)
        if x.key == "late_window":
            late = [
                KeptWeights(**_versioned(k["counters"]), summary=describe(w["episodes"]), episodes=w["episodes"])
                for k, w in zip(kept, per_weights)
            ]
            result.late_window = LateWindow(**(vars(pooled) | {"episodes": []}), episodes_per_weights=x.episodes, weights=late)
        else:
            result.secondary[x.key] = pooled
    if ev.drill_trials:
        result.drills = play_final_drills(env, ev, online, cfg.net, processes, echo)
    filmed_name = "best.pt" if result.best else "the last weights"
    filmed = dict(rows.get("best", rows["last"]).greedy or {})
    for contender in (result.last, result.best):  # the greedy episodes' actions: filmed below, not kept in the JSON
        if contender is not None and contender.greedy:
            contender.greedy = {k: v for k, v in contender.greedy.items() if k != "actions"}
    result.seconds = round(time.perf_counter() - started, 1)
    written = write_results(run_dir, result, refused)
    say_results(result, [name for name, *_ in contenders], best_is_last, words, echo, written)
    if entry.video:
        film_greedy(env, filmed["actions"], filmed["score"], os.path.join(run_dir, VIDEO_NAME), filmed_name, echo, refused)
    return result


def select_best(
    run_dir: str,
    checkpoint: dict,
    ev: EvalConfig,
    common: dict,
    processes: int,
    echo: Echo,
    words: Words,
    refused: RefusedWrites,
) -> tuple[list[Candidate], dict | None]:
    """Step 1 of the module docstring: the selection's rows (the last weights, then each kept snapshot) and the
    checkpoint that is best.pt, written (a refusal said and counted in ``refused``); without kept snapshots no rows
    and best.pt as training left it (None: none)."""
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
    selection: list[Candidate] = []
    for name, st, got in zip(["last"] + ["snapshot"] * len(snapshots), candidates, played):
        fresh = describe(got["episodes"])
        trained = None if st.get("eval") is None else upgrade(st["eval"])
        during = None if trained is None else {k: trained[k] for k in ("score_mean", "success_rate", "episodes")}
        scores = [r["score"] for r in got["episodes"]]
        row = Candidate(**_versioned(st["counters"]), in_training=during, fresh=fresh, weights=name, score=scores)
        selection.append(row)
        said = "" if trained is None else f"in training {brief(trained, words)}; "
        echo(f"[FINAL]   {name} v{row.weights_version} ({row.env_steps:,} env steps): {said}fresh {brief(fresh, words)}")
    chosen = choose_best(selection[0].score, [s.score for s in selection[1:]])
    pick = 0 if chosen is None else chosen + 1
    best = candidates[pick]
    best.pop("path", None)
    chosen_fresh = dataclasses.asdict(selection[pick].fresh)
    best["eval"] = {k: chosen_fresh[k] for k in ("score_mean", "score_median", "success_rate", "return_mean", "episodes")}
    best["eval"] |= {"epsilon": ev.epsilon, "chosen_from": [s.weights_version for s in selection], "chosen": pick}
    saved = refused.attempt(BEST_NAME, save_best, run_dir, best)
    echo(
        f"[FINAL]   best.pt: {'the last weights' if chosen is None else 'snapshot'} v{selection[pick].weights_version}"
        + ("" if saved else " (not written)")
    )
    return selection, best


def extra_jobs(x: Extra, common: dict, last_online: dict, kept: list[dict]) -> Jobs:
    """An extra row as ``play_rows`` takes it: the kept weights (late window) or the last weights play it."""
    weights = [k["learner"]["online"] for k in kept] if x.key == "late_window" else [last_online]
    return dict(common, epsilon=x.epsilon, noop_max=x.noop_max), weights, x.episodes, x.seed, False


def say_plan(extras: list[Extra], kept: list[dict], echo: Echo) -> None:
    """The extra rows in one line, before they play."""
    said = []
    for x in extras:
        if x.key == "late_window":
            versions = f"v{kept[0]['counters']['weights_version']}-v{kept[-1]['counters']['weights_version']}"
            said.append(
                f"the late window, {len(kept)} kept weights ({versions}), {x.episodes} episodes each at epsilon {x.epsilon:g}"
            )
        else:
            said.append(f"the last weights {x.episodes} episodes {x.title}")
    if said:
        echo(f"[FINAL] and on streams of their own: {'; '.join(said)}")


def say_results(
    result: FinalResult, names: list[str], best_is_last: bool, words: Words, echo: Echo, written: bool = True
) -> None:
    """The ``[FINAL]`` lines of the final evaluation's rows (each contender in ``names``, then the extra rows), and
    whether ``eval_final.json`` was ``written``."""
    what, won = words
    for name in names:
        r = getattr(result, name)
        g = r.greedy or {}
        head = f"[FINAL] {name:<4} (v{r.weights_version}, {r.env_steps:,} env steps): {score_line(r.summary, what, won)}"
        echo(f"{head}; greedy episode {what} {g.get('score', 0):,g}{', success' if g.get('success') else ''}")
        echo(f"[FINAL] {name:<4} hazards: {format_hazards(r.hazards)}")
    if best_is_last:
        echo("[FINAL] best: the last weights (no snapshot beat them on the selection's episodes)")
    late = result.late_window
    if late is not None:
        played = f"{len(late.weights)} kept weights x {late.episodes_per_weights} episodes at epsilon {late.epsilon:g}"
        echo(f"[FINAL] late window ({played}): {score_line(late.summary, what, won)}")
        for w in late.weights:
            echo(f"[FINAL]   v{w.weights_version} ({w.env_steps:,} env steps): {brief(w.summary, words)}")
        echo(f"[FINAL] late window hazards: {format_hazards(late.hazards)}")
    for key, row in result.secondary.items():
        if row is not None:
            title = Extra(key, 0, row.epsilon or 0.0, row.noop_max, 0).title
            say_row(f"[FINAL] last {title}", row, words, echo)
    path, took = os.path.join(result.run_dir, RESULT_NAME), f"{result.seconds:.0f}s"
    echo(f"[FINAL] wrote {path} in {took}" if written else f"[FINAL] evaluated in {took}; {path} not written (see above)")


def play_final_drills(env: Any, ev: EvalConfig, online: dict, net_cfg: Any, processes: int, echo: Echo) -> Drills:
    """The last weights' drills (``eval.drill_trials`` trials per point and variant at ``eval.epsilon``), said."""
    echo(
        f"[FINAL] drills: the last weights, {ev.drill_trials} trials per hazard and variant from {ev.drill_lead} steps "
        f"before it, at epsilon {ev.epsilon:g}"
    )
    seed = stream_seed(ev.seed, EVAL_DRILLS)
    drills = play_drills(
        env, ev.drill_trials, ev.epsilon, seed, ev.drill_lead, weights=online, net_cfg=net_cfg, processes=processes
    )
    for line in format_drills(drills):
        echo(f"[FINAL] drill {line}")
    return drills


def film_greedy(
    env: Any, actions: list[int], score: float, path: str, name: str, echo: Echo, refused: RefusedWrites | None = None
) -> None:
    """Film ``name``'s greedy episode to ``path``; a failure is said, not raised (the figures are already written), and
    one the disk made (an OSError) is counted in ``refused`` with the results not written."""
    from shared.evaluation.video import record_video  # imageio: only where an env films

    try:
        info = record_video(env, actions, path, expected_score=score)
    except Exception as exc:  # noqa: BLE001 - ffmpeg, disk, or a replay that differs: the run's results stand
        if isinstance(exc, OSError) and refused is not None:
            refused.refuse(os.path.basename(path), exc)
        else:
            echo(f"[FINAL] no video: {type(exc).__name__}: {exc}")
        return
    echo(f"[FINAL] video of the greedy episode of {name} (score {score:,g}): {info.path} ({info.frames:,} frames)")


def write_results(run_dir: str, result: FinalResult, refused: RefusedWrites) -> bool:
    """``eval_final.json`` (``best`` a copy of ``last`` with ``same_as_last`` when the selection kept it; a row without
    episodes null) and one ``final/`` metrics row at the run's last env step with each row's score and success rate;
    a write the disk refuses is said and counted in ``refused``, the other goes on. Whether eval_final.json was written."""
    written = refused.attempt(RESULT_NAME, write_atomic, os.path.join(run_dir, RESULT_NAME), result.to_json())
    figures: dict[str, Any] = {}
    rows = {"last": result.last, "best": result.best, "late": result.late_window}
    for name, row in (
        rows | {"low_epsilon": result.secondary.get("low_epsilon"), "noop": result.secondary.get("noop_greedy")}
    ).items():
        if row:
            s = row.summary
            figures |= {f"final/{name}_score": s.score_mean, f"final/{name}_success_rate": s.success_rate}
            if isinstance(row, WeightsRow):
                figures |= {f"final/{name}_return": s.return_mean, f"final/{name}_greedy_score": (row.greedy or {}).get("score")}
    try:
        metrics = MetricsLog(run_dir, refused=refused)  # its row and TensorBoard: said and counted there
    except OSError as exc:  # metrics.jsonl cannot even be opened
        refused.refuse(METRICS_NAME, exc)
        return written
    with contextlib.closing(metrics):
        metrics.write(result.updates, result.env_steps, result.wall_seconds, figures)
    return written


@dataclasses.dataclass
class FinalEvalArgs:
    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """A run folder made by launch.local."""
    processes: int = 0
    """Worker processes that play the episodes (0: one per core this process may use)."""


def main(argv: list[str] | None = None) -> int:
    refused = result_writes(print)
    try:
        args = parse(FinalEvalArgs, argv, "python -m launch.final_eval", __doc__.split("\n")[0])
        if args.processes < 0:
            raise UsageError(f"--processes={args.processes} must be >= 0 (0: one per core)")
        if not has_checkpoint(args.run_dir):
            raise UsageError(f"run_dir={args.run_dir!r} has no {CHECKPOINT_NAME}")
        result = final_evaluation(args.run_dir, args.processes, refused=refused)
    except (UsageError, ValueError) as exc:  # ValueError (ConfigError too): no readable checkpoint or config, named
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result is None:
        print(f"[FINAL] nothing to evaluate: no updates in {args.run_dir!r}, or eval.final_episodes 0")
    if unwritten := unwritten_line(args.run_dir, refused):
        print(unwritten, file=sys.stderr)
        return EXIT_UNWRITTEN
    return 0


if __name__ == "__main__":
    sys.exit(main())
