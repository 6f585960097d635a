"""Compare groups of runs on their final evaluations, with confidence intervals.

    python -m launch.tools.report runs/lr1e-4-* runs/baseline-*            # run folders (or folders of run folders)
    python -m launch.tools.report runs/ --baseline random.json --baseline right-A.json --out docs/lab/experiments/1-1

Runs are grouped by ``--label`` (given at launch) or, where no run has one, by the config values in which the runs
differ (seeds, ports, folders and log options excepted). Per group: the number of runs, env steps, the machines
(CPU model, and whether it has native bf16), env steps/s, samples trained per transition, each run's
final-evaluation mean score and success rate (``eval_final.json`` of launch/final_eval.py: the last weights and
best.pt; Mario's score is the furthest x_pos, its success the flag), and over the runs the mean and the
interquartile mean (IQM: the mean of the middle half, robust to one odd run) of the last weights' mean score, each
with a 95% bootstrap confidence interval over runs (scipy.stats.bootstrap, percentile method; none for a single
run), and the mean success rate with its interval.
Baselines (``--baseline``: JSON files of ``launch.evaluate --policy random`` or ``--policy constant``) are rows of
their own, their intervals over episodes.

A second table lists each run: its seed, the last weights' and best.pt's mean score with its interval over
episodes, and where the episodes that did not succeed cluster: the ``--end-window`` (200 by default, in score units)
holding most of their ends, with its count ("35 of 50 end at 600-720": a policy that fails at one hazard, such as 1-1's
first goomba, rather than across the stage).

Printed as Markdown tables; ``--out PREFIX`` also writes PREFIX.md and PREFIX.json. ``--plot PNG`` draws each
group's in-training evaluation curve (``eval/score`` of metrics.jsonl, each run interpolated onto a common grid of
env steps) as the mean over runs with a 95% bootstrap band, the baselines as horizontal lines. Bad input (a folder that
is no run, a run without a final evaluation) is named on stderr; such runs are listed and left out of the
statistics, and a folder that is neither a run nor holds any exits with 2. Files written under Mario's words
(``x_pos_mean``, ``flag_rate``: runs before the names were generic) are read through ``shared.results.upgrade``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from collections.abc import Callable
from typing import Annotated

import numpy as np
import tyro
from scipy import stats

from launch.cli import UsageError, parse
from launch.final_eval import RESULT_NAME, describe
from launch.machine import MACHINE_NAME
from shared.results import upgrade

CONFIDENCE = 0.95
END_WINDOW = 200  # in score units; on Mario about one hazard of 1-1 (the first pipes' goomba stops runs at 600-720)
# Config keys that never make two runs different treatments.
IGNORED = (
    "seed",
    "actor.seed",
    "learner.seed",
    "eval.seed",
    "run_dir",
    "resume",
    "log_every",
    "progress",
    "spawn_actors",
    "label",
    "device",
)
IGNORED_PREFIXES = ("transport.",)


def find_runs(paths: list[str]) -> list[str]:
    """Run folders (holding config.json) among ``paths`` and their direct sub-folders, sorted."""
    runs = []
    for path in paths:
        if os.path.isfile(os.path.join(path, "config.json")):
            runs.append(path)
            continue
        inside = sorted(os.path.join(path, name) for name in os.listdir(path)) if os.path.isdir(path) else []
        found = [p for p in inside if os.path.isfile(os.path.join(p, "config.json"))]
        if not found:
            raise UsageError(f"{path!r} is not a run folder (no config.json) and holds none")
        runs.extend(found)
    return sorted(dict.fromkeys(runs))


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_run(path: str) -> dict:
    """What the report needs of one run folder; ``final`` is None when it has no eval_final.json."""
    with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    final = machine = None
    if os.path.isfile(os.path.join(path, RESULT_NAME)):
        with open(os.path.join(path, RESULT_NAME), encoding="utf-8") as fh:
            final = upgrade(json.load(fh))
    if os.path.isfile(os.path.join(path, MACHINE_NAME)):
        with open(os.path.join(path, MACHINE_NAME), encoding="utf-8") as fh:
            machine = json.load(fh)
    return {"path": path, "config": flatten(config), "final": final, "machine": machine}


def group_runs(runs: list[dict]) -> dict[str, list[dict]]:
    """Group name -> runs: by label where any run has one, else by the config values that differ."""
    if any(r["config"].get("label") for r in runs):
        groups: dict[str, list[dict]] = {}
        for r in runs:
            groups.setdefault(r["config"].get("label") or "(no label)", []).append(r)
        return groups
    keys = sorted({k for r in runs for k in r["config"]})
    differing = [
        k
        for k in keys
        if k not in IGNORED and not k.startswith(IGNORED_PREFIXES) and len({json.dumps(r["config"].get(k)) for r in runs}) > 1
    ]
    groups = {}
    for r in runs:
        name = ", ".join(f"{k}={r['config'].get(k)}" for k in differing) or "all runs"
        groups.setdefault(name, []).append(r)
    return groups


def interval(values: list[float], statistic) -> list[float] | None:
    """95% percentile-bootstrap interval of ``statistic`` over ``values`` (None for fewer than two)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    if np.ptp(x) == 0:
        return [float(x[0]), float(x[0])]
    ci = stats.bootstrap(
        (x,), statistic, confidence_level=CONFIDENCE, n_resamples=9999, method="percentile", random_state=0
    ).confidence_interval
    return [float(ci.low), float(ci.high)]


def iqm(x, axis=-1):
    """Interquartile mean: the mean of the middle 50% (scipy.stats.trim_mean, a quarter off each end)."""
    return stats.trim_mean(x, 0.25, axis=axis)


def densest_end(episodes: list[dict], window: float = END_WINDOW) -> dict | None:
    """Where the episodes that did not succeed cluster: the window of ``window`` score holding the most of their
    ends (the first such window from the left), as {"lo", "hi" (the least and greatest end in it), "count",
    "episodes" (all episodes, successes included)}; None when every episode succeeded."""
    ends = np.sort(np.array([e["score"] for e in episodes if not e["success"]], dtype=np.float64))
    if len(ends) == 0:
        return None
    last_in = np.searchsorted(ends, ends + window, side="left")  # ends[i:last_in[i]] lie in [ends[i], ends[i] + window)
    i = int(np.argmax(last_in - np.arange(len(ends))))
    return {"lo": float(ends[i]), "hi": float(ends[last_in[i] - 1]), "count": int(last_in[i] - i), "episodes": len(episodes)}


def cpu_label(machine: dict) -> str | None:
    """The CPU's model name and whether it has native bf16 (AMP on CPU): the two machine kinds of one model name
    differ about 2x in learner speed; and the GPU, where the machine had one (the learner runs there)."""
    cpu = machine.get("cpu")
    if cpu and "native_bf16" in machine:
        cpu = f"{cpu}, {'bf16' if machine['native_bf16'] else 'no bf16'}"
    return f"{cpu}, GPU {machine['gpu']}" if cpu and machine.get("gpu") else cpu


def replay_ratio(path: str, final: dict | None) -> float | None:
    """Samples trained per transition over the run: eval_final.json's, else the last ``learner/replay_ratio`` of
    metrics.jsonl (runs evaluated before eval_final.json recorded it)."""
    if final and final.get("samples_per_transition") is not None:
        return float(final["samples_per_transition"])
    last = None
    try:
        with open(os.path.join(path, "metrics.jsonl"), encoding="utf-8") as fh:
            for line in fh:
                if '"learner/replay_ratio"' in line:
                    last = json.loads(line)["learner/replay_ratio"]
    except (OSError, ValueError):
        return None
    return last


def evaluated(part: dict | None, window: float) -> dict | None:
    """One evaluated set of weights of eval_final.json (last or best) as a per-run entry."""
    if not part:
        return None
    entry = {**part["summary"], "weights_version": part.get("weights_version"), "env_steps": part.get("env_steps")}
    if part.get("episodes"):  # older files lack the episodes: no "ends" then
        entry["ends"] = densest_end(part["episodes"], window)
    return entry


def summarize_group(name: str, runs: list[dict], window: float = END_WINDOW) -> dict:
    done = [r for r in runs if r["final"] is not None]
    last = [r["final"]["last"]["summary"] for r in done]
    best = [r["final"]["best"]["summary"] for r in done if r["final"].get("best")]
    xs, rates = [s["score_mean"] for s in last], [s["success_rate"] for s in last]
    per_run = []
    for r in runs:
        f, m = r["final"], r["machine"] or {}
        wall = (f or {}).get("wall_seconds") or 0.0
        per_run.append(
            {
                "path": r["path"],
                "seed": r["config"].get("seed"),
                "cpu": cpu_label(m),
                "env_steps": f["env_steps"] if f else None,
                "samples_per_transition": replay_ratio(r["path"], f),
                "env_steps_per_s": (f["env_steps"] / wall) if f and wall else None,
                "last": evaluated(f["last"], window) if f else None,
                "best": evaluated(f.get("best"), window) if f else None,
            }
        )
    return {
        "group": name,
        "runs": len(runs),
        "evaluated": len(done),
        "per_run": per_run,
        "env_steps": sorted({p["env_steps"] for p in per_run if p["env_steps"] is not None}),
        "cpus": sorted({p["cpu"] for p in per_run if p["cpu"]}),
        "score_mean": float(np.mean(xs)) if xs else None,
        "score_mean_ci": interval(xs, np.mean),
        "score_iqm": float(iqm(np.asarray(xs))) if xs else None,
        "score_iqm_ci": interval(xs, iqm),
        "success_rate_mean": float(np.mean(rates)) if rates else None,
        "success_rate_ci": interval(rates, np.mean),
        "best_score_mean": float(np.mean([s["score_mean"] for s in best])) if best else None,
        "best_success_rate_mean": float(np.mean([s["success_rate"] for s in best])) if best else None,
    }


def load_baseline(path: str) -> dict:
    """A launch.evaluate JSON file as a report row: its episodes' mean score and success rate with intervals."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = upgrade(json.load(fh))
        records, policy = data["episodes"], data["policy"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--baseline={path!r} is not a launch.evaluate JSON file ({exc})") from None
    d = describe(records)
    name = policy if policy != "constant" else f"constant {data.get('action')}"
    where = f", stage {data['stage']}" if data.get("stage") else ""
    # the file's name tells apart baselines of one policy on two settings of an env (Mario with and without jump release)
    group = f"baseline: {name}, epsilon {data['epsilon']:g}{where} ({os.path.basename(path)})"
    return {
        "group": group,
        "path": path,
        "episodes": d["episodes"],
        "score_mean": d["score_mean"],
        "score_mean_ci": d["score_ci"],
        "success_rate_mean": d["success_rate"],
        "success_rate_ci": d["success_rate_ci"],
        "stage": data.get("stage"),
    }


def score_text(x: float) -> str:
    """A score as the tables print it: whole above 100 (Mario's 1,717), three significant digits below (a return of
    -0.45)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _ci(v: list[float] | None, fmt: str | Callable[[float], str]) -> str:
    show = fmt if callable(fmt) else (lambda x: format(x, fmt))
    return f" [{show(v[0])}, {show(v[1])}]" if v else ""


def markdown(groups: list[dict], baselines: list[dict]) -> str:
    lines = [
        "| group | runs | env steps | CPU | env steps/s | samples per transition | each run: last score (success) "
        "| score mean [95% CI] | score IQM [95% CI] | success rate [95% CI] | best.pt score, success |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        each = ", ".join(
            f"{score_text(p['last']['score_mean'])} ({p['last']['success_rate']:.0%})" if p["last"] else "no final eval"
            for p in g["per_run"]
        )
        rates = [p["env_steps_per_s"] for p in g["per_run"] if p["env_steps_per_s"]]
        ratios = [p["samples_per_transition"] for p in g["per_run"] if p["samples_per_transition"] is not None]
        mean = "-" if g["score_mean"] is None else f"{score_text(g['score_mean'])}{_ci(g['score_mean_ci'], score_text)}"
        mid = "-" if g["score_iqm"] is None else f"{score_text(g['score_iqm'])}{_ci(g['score_iqm_ci'], score_text)}"
        rate = "-" if g["success_rate_mean"] is None else f"{g['success_rate_mean']:.0%}{_ci(g['success_rate_ci'], '.0%')}"
        best = "-" if g["best_score_mean"] is None else f"{score_text(g['best_score_mean'])}, {g['best_success_rate_mean']:.0%}"
        lines.append(
            f"| {g['group']} | {g['evaluated']}/{g['runs']} | {', '.join(f'{s:,}' for s in g['env_steps'])} "
            f"| {'; '.join(g['cpus']) or '?'} | {', '.join(f'{r:.0f}' for r in rates) or '-'} "
            f"| {', '.join(f'{r:.2f}' for r in ratios) or '-'} | {each} "
            f"| {mean} | {mid} | {rate} | {best} |"
        )
    for b in baselines:
        lines.append(
            f"| {b['group']} | {b['episodes']} episodes | - | - | - | - | - "
            f"| {score_text(b['score_mean'])}{_ci(b['score_mean_ci'], score_text)} | - "
            f"| {b['success_rate_mean']:.0%}{_ci(b['success_rate_ci'], '.0%')} | - |"
        )
    return "\n".join(lines)


def eval_curve(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, mean score) of a run's in-training evaluations (metrics.jsonl rows with eval/score)."""
    xs, ys = [], []
    try:
        with open(os.path.join(path, "metrics.jsonl"), encoding="utf-8") as fh:
            for line in fh:
                row = upgrade(json.loads(line)) if line.strip() else {}
                if "eval/score" in row:
                    xs.append(row["env_steps"])
                    ys.append(row["eval/score"])
    except OSError:
        pass
    order = np.argsort(xs, kind="stable")
    return np.asarray(xs, np.float64)[order], np.asarray(ys, np.float64)[order]


def plot_groups(groups: list[dict], baselines: list[dict], out: str, points: int = 40) -> None:
    """Each group's mean evaluation curve over its runs with a 95% bootstrap band (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6), dpi=120)
    ax = fig.add_subplot()
    for g in groups:
        curves = [c for c in (eval_curve(p["path"]) for p in g["per_run"]) if len(c[0])]
        if not curves:
            continue
        # the env steps every run has evaluations around: from the latest first evaluation to the earliest last one
        grid = np.linspace(max(c[0][0] for c in curves), max(min(c[0][-1] for c in curves), max(c[0][0] for c in curves)), points)
        ys = np.stack([np.interp(grid, *c) for c in curves])  # [runs, points]
        (line,) = ax.plot(grid, ys.mean(axis=0), label=f"{g['group']} ({len(curves)} run{'s' * (len(curves) > 1)})")
        if len(curves) > 1:
            band = np.array([interval(col.tolist(), np.mean) for col in ys.T])
            ax.fill_between(grid, band[:, 0], band[:, 1], color=line.get_color(), alpha=0.2, linewidth=0)
    for b, style in zip(baselines, itertools.cycle(("--", ":", "-."))):
        ax.axhline(b["score_mean"], linestyle=style, color="grey", linewidth=1, label=b["group"])
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation mean score (in training)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out)


def _weights(p: dict | None, with_version: bool) -> tuple[str, str]:
    """(score mean [95% CI], successes; where the other episodes cluster) of one per-run entry, as table cells."""
    if not p:
        return "-", "-"
    where = f"v{p['weights_version']}, {p['env_steps']:,} env steps: " if with_version and p.get("env_steps") else ""
    won = round(p["success_rate"] * p["episodes"])
    cell = f"{where}{score_text(p['score_mean'])}{_ci(p.get('score_ci'), score_text)}, {won}/{p['episodes']} successes"
    if "ends" not in p:
        return cell, "-"
    e = p["ends"]
    if not e:
        return cell, "every episode succeeded"
    return cell, f"{e['count']} of {e['episodes']} at {score_text(e['lo'])}-{score_text(e['hi'])}"


def per_run_markdown(groups: list[dict]) -> str:
    """One row per evaluated run: seed, the last weights and best.pt, and where their unsuccessful episodes end."""
    lines = [
        "| group | run (seed) | last weights: score mean [95% CI], successes | where most other episodes end "
        "| best.pt: score mean [95% CI], successes | where most other episodes end |",
        "|---|---|---|---|---|---|",
    ]
    for g in groups:
        for p in g["per_run"]:
            if p["last"] is None:
                continue
            last, last_ends = _weights(p["last"], with_version=False)
            best, best_ends = _weights(p["best"], with_version=True)
            lines.append(
                f"| {g['group']} | {os.path.basename(p['path'].rstrip(os.sep))} ({p['seed']}) | {last} "
                f"| {last_ends} | {best} | {best_ends} |"
            )
    return "\n".join(lines)


def report(paths: list[str], baseline_paths: list[str], window: float = END_WINDOW) -> tuple[list[dict], list[dict], list[str]]:
    """(group summaries, baseline rows, warnings about runs left out of the statistics)."""
    runs = [load_run(p) for p in find_runs(paths)]
    warnings = [
        f"{r['path']}: no {RESULT_NAME} (run python -m launch.final_eval {r['path']}); left out"
        for r in runs
        if r["final"] is None
    ]
    groups = [summarize_group(name, members, window) for name, members in group_runs(runs).items()]
    return groups, [load_baseline(p) for p in baseline_paths], warnings


@dataclasses.dataclass
class ReportArgs:
    paths: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run folders, or folders holding run folders (one or more)."""
    baseline: Annotated[tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="JSON")] = ()
    """A launch.evaluate result (--policy random or constant) to show as a row; repeat it for more."""
    out: Annotated[str | None, tyro.conf.arg(metavar="PREFIX")] = None
    """Also write PREFIX.md and PREFIX.json."""
    plot: Annotated[str | None, tyro.conf.arg(metavar="PNG")] = None
    """Draw the groups' evaluation curves with 95% bands."""
    end_window: float = END_WINDOW
    """Width in score units of the window in which the per-run table finds where most unsuccessful episodes end
    (on Mario 200 is about one hazard of 1-1)."""


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(ReportArgs, argv, "python -m launch.tools.report", __doc__.split("\n")[0])
        if not args.paths:
            raise UsageError("RUN_DIR: name at least one run folder")
        if not args.end_window > 0:
            raise UsageError(f"--end-window={args.end_window:g} must be a positive width in score units")
        groups, baselines, warnings = report(list(args.paths), list(args.baseline), args.end_window)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    table = markdown(groups, baselines) + "\n\n" + per_run_markdown(groups)
    print(table)
    if args.out:
        folder = os.path.dirname(args.out)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(args.out + ".md", "w", encoding="utf-8") as fh:
            fh.write(table + "\n")
        with open(args.out + ".json", "w", encoding="utf-8") as fh:
            json.dump({"groups": groups, "baselines": baselines, "warnings": warnings}, fh, indent=2)
            fh.write("\n")
    if args.plot:
        plot_groups(groups, baselines, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
