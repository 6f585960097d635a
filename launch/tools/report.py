"""Compare groups of runs on their final evaluations, with confidence intervals; or two groups seed by seed.

    python -m launch.tools.report runs/lr1e-4-* runs/baseline-*            # run folders (or folders of run folders)
    python -m launch.tools.report runs/ --baseline random.json --baseline right-A.json --out docs/lab/experiments/1-1
    python -m launch.tools.report --paired lr1e-4 baseline runs/ --json paired.json   # A - B on the seeds both ran
    python -m launch.tools.report --paired lr1e-4 baseline runs/ --earlier old.json   # ... and an earlier report's seeds

Runs are grouped by ``--label``, else by the config values they differ in. A group's row: the mean over runs of the
last weights' score and success rate with a 95% t interval (one run: over its episodes), then its further evaluations,
hazards and minimum detectable effect. ``--paired A B`` matches two groups' runs by seed: per figure the mean A - B
with a t interval, sign count, SD and MDE; ``--earlier`` adds the seeds of paired reports whose run folders are gone.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import tyro

from launch.cli import UsageError, parse
from launch.machine import MACHINE_NAME
from launch.tools.stats import ALPHA, CONFIDENCE, POWER, mde_paired, mde_two_groups, paired, pooled_sd, t_interval
from shared.config import flatten
from shared.evaluation.names import read_metrics, upgrade
from shared.evaluation.protocol import describe
from shared.evaluation.result import RESULT_NAME, load_result
from shared.writes import write_atomic

END_WINDOW = 200  # in score units; on Mario about one hazard of 1-1 (the first pipes' goomba stops runs at 600-720)
# Config keys that never make two runs different treatments.
IGNORED = tuple("seed actor.seed learner.seed eval.seed run_dir resume log_every progress spawn_actors label device".split())
IGNORED_PREFIXES = ("transport.",)
TIERS = (4, 6)  # the protocol's group sizes: the minimum detectable effects are given for these too
PROBES = ("probe/churn", "probe/gap", "probe/gap_relative")  # metrics.jsonl, written at every weight broadcast
PROBE_TAIL = 0.2  # a run's probe figure: the mean of its rows in this last fraction of its env steps
# the further evaluations' keys, in the tables' order, and their names in the paired table
SECONDARY = {"late_window": "late window", "low_epsilon": "low epsilon", "noop_greedy": "no-op greedy"}
_pct = "{:.0%}".format  # a rate as the tables print it
# a summary's figures in the paired table: key, name, kind
FIGURES = (("score_mean", "score mean", "score"), ("success_rate", "success rate", "rate"))


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


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_run(path: str) -> dict:
    """What the report needs of one run folder; ``final`` is None when it has no eval_final.json."""
    final, machine = os.path.join(path, RESULT_NAME), os.path.join(path, MACHINE_NAME)
    return {
        "path": path,
        "config": flatten(_read_json(os.path.join(path, "config.json"))),
        "final": load_result(final).to_dict() if os.path.isfile(final) else None,
        "machine": _read_json(machine) if os.path.isfile(machine) else None,
    }


def run_seed(config: dict) -> int | None:
    """A run's seed (flattened config.json): ``seed``, else (a config saved with -1) the first component's; or None."""
    values = (config.get(key) for key in ("seed", "learner.seed", "actor.seed", "eval.seed"))
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0), None)


def group_runs(runs: list[dict]) -> dict[str, list[dict]]:
    """Group name -> runs: by label where any run has one, else by the config values that differ."""
    labelled = any(r["config"].get("label") for r in runs)
    keys = sorted({k for r in runs for k in r["config"]} - set(IGNORED))
    differing = [
        k for k in keys if not k.startswith(IGNORED_PREFIXES) and len({json.dumps(r["config"].get(k)) for r in runs}) > 1
    ]
    groups: dict[str, list[dict]] = {}
    for r in runs:
        name = ", ".join(f"{k}={r['config'].get(k)}" for k in differing) or "all runs"
        groups.setdefault((r["config"].get("label") or "(no label)") if labelled else name, []).append(r)
    return groups


def over_runs(values: list[float], rate: bool = False) -> tuple[float | None, list[float] | None]:
    """(mean, 95% t interval over runs, a ``rate``'s clipped to [0, 1]) of one figure per run; (mean, None) for one."""
    if not values:
        return None, None
    mean, lo, hi = t_interval(values, CONFIDENCE)
    if lo is None or hi is None:
        return mean, None
    return mean, ([max(lo, 0.0), min(hi, 1.0)] if rate else [lo, hi])


def interval_label(runs: int, episodes: int | None = None) -> str:
    """What a row's intervals are over: runs (t) or, for one run, its episodes."""
    if runs >= 2:
        return f"95% t over {runs} runs"
    if runs == 1:
        return f"95% over {episodes} episodes (one run)" if episodes else "one run"
    return "-"


def _over_runs(summaries: list[dict]) -> dict:
    """A row's mean score and success rate with their intervals: t over runs, or one run's own over its episodes."""
    score, score_ci = over_runs([s["score_mean"] for s in summaries])
    rate, rate_ci = over_runs([s["success_rate"] for s in summaries], rate=True)
    if len(summaries) == 1:
        score_ci, rate_ci = summaries[0].get("score_ci"), summaries[0].get("success_rate_ci")
    interval = interval_label(len(summaries), summaries[0].get("episodes") if summaries else None)
    return dict(score_mean=score, score_mean_ci=score_ci, success_rate_mean=rate, success_rate_ci=rate_ci, interval=interval)


def _over_episodes(s: dict) -> dict:
    """``_over_runs``'s figures of one evaluation's summary: its own, over episodes."""
    figures = dict(score_mean=s["score_mean"], score_mean_ci=s.get("score_ci"), success_rate_mean=s["success_rate"])
    return figures | dict(success_rate_ci=s.get("success_rate_ci"), interval=f"95% over {s.get('episodes')} episodes")


def densest_end(episodes: list[dict], window: float = END_WINDOW) -> dict | None:
    """Where the episodes that did not succeed cluster: the leftmost window of ``window`` score holding the most of
    their ends, as {"lo", "hi" (its least and greatest end), "count", "episodes" (all)}; None when all succeeded."""
    ends = np.sort(np.array([e["score"] for e in episodes if not e["success"]], dtype=np.float64))
    if len(ends) == 0:
        return None
    last_in = np.searchsorted(ends, ends + window, side="left")  # ends[i:last_in[i]] lie in [ends[i], ends[i] + window)
    i = int(np.argmax(last_in - np.arange(len(ends))))
    return {"lo": float(ends[i]), "hi": float(ends[last_in[i] - 1]), "count": int(last_in[i] - i), "episodes": len(episodes)}


def cpu_label(machine: dict) -> str | None:
    """The CPU's model name, whether it has native bf16 (about 2x in learner speed), and the GPU where there was one."""
    cpu = machine.get("cpu")
    if cpu and "native_bf16" in machine:
        cpu = f"{cpu}, {'bf16' if machine['native_bf16'] else 'no bf16'}"
    return f"{cpu}, GPU {machine['gpu']}" if cpu and machine.get("gpu") else cpu


def replay_ratio(path: str, final: dict | None) -> float | None:
    """Samples trained per transition: eval_final.json's, else metrics.jsonl's last ``learner/replay_ratio``."""
    if final and final.get("samples_per_transition") is not None:
        return float(final["samples_per_transition"])
    ratios = [row["learner/replay_ratio"] for row in metrics_rows(path) if "learner/replay_ratio" in row]
    return ratios[-1] if ratios else None


def metrics_rows(path: str) -> list[dict]:
    """A run folder's metrics.jsonl rows (``read_metrics``, its note on stderr); none from a file that cannot be read."""
    try:
        rows, note = read_metrics(os.path.join(path, "metrics.jsonl"))
    except (OSError, ValueError):
        return []
    if note:
        print(f"note: {note}", file=sys.stderr)
    return rows


def evaluated(part: dict | None, window: float) -> dict | None:
    """One evaluated set of weights of eval_final.json (last or best) as a per-run entry."""
    if not part:
        return None
    entry = {**part["summary"], "weights_version": part["weights_version"], "env_steps": part["env_steps"]}
    if part["episodes"]:  # no "ends" without the episodes
        entry["ends"] = densest_end(part["episodes"], window)
    return entry


def _g(value: Any, fmt: str = "g") -> str:
    return "?" if value is None else format(value, fmt)


def further(data: dict | None) -> dict[str, tuple[str, dict]]:
    """key -> (row name, summary) of the further evaluations a result or a baseline holds that have a summary."""
    data = data or {}
    secondary = data.get("secondary") or {}
    parts = {"late_window": data.get("late_window"), **{key: secondary.get(key) for key in ("low_epsilon", "noop_greedy")}}
    return {key: (_further_name(key, p), p["summary"]) for key, p in parts.items() if isinstance(p, dict) and p.get("summary")}


def _further_name(key: str, p: dict) -> str:
    if key == "late_window":
        each = _g(p.get("episodes_per_weights"))
        return f"late window (epsilon {_g(p.get('epsilon'))}, {len(p.get('weights') or [])} weights x {each} episodes)"
    if key == "low_epsilon":
        return f"low epsilon ({_g(p.get('epsilon'))})"
    return f"no-op greedy (0-{_g(p.get('noop_max'))} no-ops, then epsilon 0)"


def clusters(hazards: dict | None) -> list[dict]:
    """The hazard clusters of a ``hazards`` entry (none for the histogram kind or an absent entry)."""
    if not isinstance(hazards, dict) or hazards.get("kind") != "clusters":
        return []
    return [c for c in hazards.get("clusters") or [] if isinstance(c, dict) and "name" in c]


def _hazard_row(c: dict, counts: dict, mean: float | None, ci: list[float] | None, interval: str) -> dict:
    """A hazard's pass-rate row; ``counts``: the runs and their rates (a group) or the episodes (a baseline)."""
    x = c.get("x")
    where = f" (x {score_text(x[0])}-{score_text(x[1])})" if isinstance(x, list) and len(x) == 2 else ""
    row = {"key": "hazard", "row": f"hazard {c['name']}{where}: pass rate", "name": c["name"], "x": x, **counts}
    return {**row, "pass_rate_mean": mean, "pass_rate_ci": ci, "interval": interval}


def group_rows(done: list[dict]) -> list[dict]:
    """The further rows of a group: each further evaluation and each hazard's pass rate, over its evaluated runs."""
    rows = []
    for key in SECONDARY:
        parts = [further(r["final"]).get(key) for r in done]
        present = [p for p in parts if p]
        if present:
            per_run = [p and {k: p[1][k] for k in ("score_mean", "success_rate")} for p in parts]
            figures = _over_runs([p[1] for p in present])
            rows.append({"key": key, "row": present[0][0], "runs": len(present), "per_run": per_run, **figures})
    hazards = [clusters(r["final"]["last"].get("hazards")) for r in done]
    first: dict[str, dict] = {}  # cluster name -> the first run's cluster (its x range)
    for c in itertools.chain.from_iterable(hazards):
        first.setdefault(c["name"], c)
    for name, c in first.items():
        rates: list[Any] = [next((h.get("pass_rate") for h in cs if h["name"] == name), None) for cs in hazards]
        values = [float(v) for v in rates if v is not None]
        counts = {"runs": len(values), "per_run": rates}
        rows.append(_hazard_row(c, counts, *over_runs(values, rate=True), interval_label(len(values))))
    return rows


def summarize_group(name: str, runs: list[dict], window: float = END_WINDOW) -> dict:
    done = [r for r in runs if r["final"] is not None]
    best = [r["final"]["best"]["summary"] for r in done if r["final"]["best"]]
    per_run = []
    for r in runs:
        f = r["final"]
        per_run.append(
            {
                "path": r["path"],
                "seed": run_seed(r["config"]),
                "cpu": cpu_label(r["machine"] or {}),
                "env_steps": f["env_steps"] if f else None,
                "samples_per_transition": replay_ratio(r["path"], f),
                "env_steps_per_s": f["env_steps"] / f["wall_seconds"] if f and f["wall_seconds"] else None,
                "last": evaluated(f["last"], window) if f else None,
                "best": evaluated(f["best"], window) if f else None,
            }
        )
    return {
        "group": name,
        "runs": len(runs),
        "evaluated": len(done),
        "per_run": per_run,
        "env_steps": sorted({p["env_steps"] for p in per_run if p["env_steps"] is not None}),
        "cpus": sorted({p["cpu"] for p in per_run if p["cpu"]}),
        **_over_runs([r["final"]["last"]["summary"] for r in done]),
        "best_score_mean": float(np.mean([s["score_mean"] for s in best])) if best else None,
        "best_success_rate_mean": float(np.mean([s["success_rate"] for s in best])) if best else None,
        "rows": group_rows(done),
    }


def load_baseline(path: str) -> dict:
    """A launch.evaluate JSON file as a report row: its episodes' mean score and success rate with intervals."""
    try:
        data = upgrade(_read_json(path))
        records, policy = data["episodes"], data["policy"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--baseline={path!r} is not a launch.evaluate JSON file ({exc})") from None
    d = dataclasses.asdict(describe(records))
    name = policy if policy != "constant" else f"constant {data.get('action')}"
    where = f", stage {data['stage']}" if data.get("stage") else ""
    # the file's name tells apart baselines of one policy on two settings of an env (Mario with and without jump release)
    group = f"baseline: {name}, epsilon {data['epsilon']:g}{where} ({os.path.basename(path)})"
    try:  # the further rows: its secondary evaluations and its hazards' pass rates, over episodes
        rows = [
            {"key": key, "row": name, "episodes": s.get("episodes"), **_over_episodes(s)}
            for key, (name, s) in further({"secondary": data.get("secondary")}).items()
        ]
        counts = [(c, {"reached": c.get("reached"), "ended": c.get("ended")}) for c in clusters(data.get("hazards"))]
        rows += [_hazard_row(c, n, c.get("pass_rate"), None, "-") for c, n in counts]
    except (KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"--baseline={path!r}: malformed secondary or hazards entry ({exc!r})") from None
    return dict(group=group, path=path, episodes=d["episodes"], **_over_episodes(d), stage=data.get("stage"), rows=rows)


def score_text(x: float) -> str:
    """A score as the tables print it: whole from 100 (Mario's 1,717), three significant digits below (a return, -0.45)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def rate_points(x: float) -> str:
    """A difference of rates in percentage points: whole from 10 points up, one decimal below, 0 for none."""
    p = round(100 * x, 1)
    return "0" if p == 0 else f"{p:.0f}" if abs(p) >= 10 else f"{p:.1f}"


def _mean(x: float | None, ci: list[float] | None, show: Callable[[float], str] = score_text) -> str:
    """A mean and its interval (if any) as a table cell; "-" for none."""
    return "-" if x is None else show(x) + (f" [{show(ci[0])}, {show(ci[1])}]" if ci else "")


def _cells(row: dict) -> str:
    """The score and success-rate cells of a group, baseline or further row."""
    return f"{_mean(row['score_mean'], row['score_mean_ci'])} | {_mean(row['success_rate_mean'], row['success_rate_ci'], _pct)}"


def row_markdown(owner: str, count: str, row: dict) -> str:
    """One further row of a group or baseline, in the group table's columns."""
    hazard = row["key"] == "hazard"
    if "per_run" not in row:
        each = f"{_g(row.get('reached'))} reached, {_g(row.get('ended'))} ended there" if hazard else "-"
    elif hazard:
        each = ", ".join("-" if v is None else _pct(v) for v in row["per_run"])
    else:
        each = ", ".join("-" if p is None else f"{score_text(p['score_mean'])} ({p['success_rate']:.0%})" for p in row["per_run"])
    cells = f"- | {_mean(row['pass_rate_mean'], row['pass_rate_ci'], _pct)}" if hazard else _cells(row)
    return f"| {owner}: {row['row']} | {count} | - | - | - | - | {each} | {cells} | {row['interval']} | - |"


def markdown(groups: list[dict], baselines: list[dict]) -> str:
    lines = [
        "| group | runs | env steps | CPU | env steps/s | samples per transition | each run: last score (success) "
        "| score mean [95% CI] | success rate [95% CI] | 95% CI over | best.pt score, success |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        each = ", ".join(
            f"{score_text(p['last']['score_mean'])} ({p['last']['success_rate']:.0%})" if p["last"] else "no final eval"
            for p in g["per_run"]
        )
        rates = [p["env_steps_per_s"] for p in g["per_run"] if p["env_steps_per_s"]]
        ratios = [p["samples_per_transition"] for p in g["per_run"] if p["samples_per_transition"] is not None]
        best = "-" if g["best_score_mean"] is None else f"{score_text(g['best_score_mean'])}, {g['best_success_rate_mean']:.0%}"
        lines.append(
            f"| {g['group']} | {g['evaluated']}/{g['runs']} | {', '.join(f'{s:,}' for s in g['env_steps'])} "
            f"| {'; '.join(g['cpus']) or '?'} | {', '.join(f'{r:.0f}' for r in rates) or '-'} "
            f"| {', '.join(f'{r:.2f}' for r in ratios) or '-'} | {each} | {_cells(g)} | {g['interval']} | {best} |"
        )
        lines.extend(row_markdown(g["group"], f"{row['runs']}/{g['evaluated']}", row) for row in g.get("rows", []))
    for b in baselines:
        lines.append(f"| {b['group']} | {b['episodes']} episodes | - | - | - | - | - | {_cells(b)} | {b['interval']} | - |")
        lines.extend(
            row_markdown(b["group"], f"{_g(row.get('episodes'))} episodes" if row["key"] != "hazard" else "-", row)
            for row in b.get("rows", [])
        )
    return "\n".join(lines)


def mde_figures(groups: list[dict]) -> dict | None:
    """The minimum detectable effects of two unpaired groups per pair of sizes (each group against the first, then
    TIERS), from the pooled SD between runs of the last weights' figures; None without an SD."""
    scores, rates = ([[p["last"][k] for p in g["per_run"] if p["last"]] for g in groups] for k in ("score_mean", "success_rate"))
    sd_score, sd_rate = pooled_sd(scores), pooled_sd(rates)
    if sd_score is None or sd_rate is None:
        return None
    sizes = [len(s) for s in scores if s]
    pairs = [(sizes[0], n) for n in sizes[1:]] or [(sizes[0], sizes[0])]
    pairs = list(dict.fromkeys(pairs + [(n, n) for n in TIERS]))
    effects = [
        {"runs": [n1, n2], "score": mde_two_groups(sd_score, n1, n2), "success_rate": mde_two_groups(sd_rate, n1, n2)}
        for n1, n2 in pairs
    ]
    return dict(sd_score=sd_score, sd_success_rate=sd_rate, power=POWER, alpha=ALPHA, pairs=effects)


def mde_line(mde: dict | None) -> str:
    """The line under the group table: the minimum detectable effect for the group sizes given."""
    if mde is None:
        return "MDE: no group has two evaluated runs, so there is no SD between runs to size it from."
    each = [
        f"{p['runs'][0]} vs {p['runs'][1]} runs: " + ("-" if p["score"] is None else _effect(p["score"], p["success_rate"]))
        for p in mde["pairs"]
    ]
    return f"MDE (80% power, 95%; pooled SD between runs {_effect(mde['sd_score'], mde['sd_success_rate'])}): " + "; ".join(each)


def _effect(score: float, rate: float) -> str:
    return f"{score_text(score)} score, {rate_points(rate)} points of success rate"


def eval_curve(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, mean score) of a run's in-training evaluations (metrics.jsonl rows with eval/score)."""
    rows = [row for row in metrics_rows(path) if "eval/score" in row]
    xs, ys = [row["env_steps"] for row in rows], [row["eval/score"] for row in rows]
    order = np.argsort(xs, kind="stable")
    return np.asarray(xs, np.float64)[order], np.asarray(ys, np.float64)[order]


def plot_groups(groups: list[dict], baselines: list[dict], out: str, points: int = 40) -> None:
    """Each group's mean evaluation curve over its runs with a 95% t band over runs (module docstring)."""
    from matplotlib.figure import Figure  # no pyplot: no backend to choose, never a window

    fig = Figure(figsize=(10, 6), dpi=120)
    ax = fig.add_subplot()
    for g in groups:
        curves = [c for c in (eval_curve(p["path"]) for p in g["per_run"]) if len(c[0])]
        if not curves:
            continue
        # the env steps every run has evaluations around: from the latest first evaluation to the earliest last one
        start = max(c[0][0] for c in curves)
        grid = np.linspace(start, max(min(c[0][-1] for c in curves), start), points)
        ys = np.stack([np.interp(grid, *c) for c in curves])  # [runs, points]
        (line,) = ax.plot(grid, ys.mean(axis=0), label=f"{g['group']} ({len(curves)} run{'s' * (len(curves) > 1)})")
        if len(curves) > 1:
            band = np.array([t_interval(col, CONFIDENCE)[1:] for col in ys.T], dtype=np.float64)
            ax.fill_between(grid, band[:, 0], band[:, 1], color=line.get_color(), alpha=0.2, linewidth=0)
    for b, style in zip(baselines, itertools.cycle(("--", ":", "-."))):
        ax.axhline(b["score_mean"], linestyle=style, color="grey", linewidth=1, label=b["group"])
    ax.set(xlabel="environment steps", ylabel="evaluation mean score (in training)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out)


def _weights(p: dict | None, with_version: bool) -> tuple[str, str]:
    """(score mean [95% CI], successes; where the other episodes cluster) of one per-run entry, as table cells."""
    if not p:
        return "-", "-"
    where = f"v{p['weights_version']}, {p['env_steps']:,} env steps: " if with_version and p.get("env_steps") else ""
    won = round(p["success_rate"] * p["episodes"])
    cell = f"{where}{_mean(p['score_mean'], p.get('score_ci'))}, {won}/{p['episodes']} successes"
    e = p.get("ends")
    if not e:
        return cell, "every episode succeeded" if "ends" in p else "-"
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
            if p["last"] is not None:
                last, best = _weights(p["last"], with_version=False), _weights(p["best"], with_version=True)
                run = f"{os.path.basename(p['path'].rstrip(os.sep))} ({p['seed']})"
                lines.append(f"| {g['group']} | {run} | {last[0]} | {last[1]} | {best[0]} | {best[1]} |")
    return "\n".join(lines)


def _left_out(runs: list[dict]) -> list[str]:
    missing = [r["path"] for r in runs if r["final"] is None]
    return [f"{path}: no {RESULT_NAME} (run python -m launch.final_eval {path}); left out" for path in missing]


def report(paths: list[str], baseline_paths: list[str], window: float = END_WINDOW) -> tuple[list[dict], list[dict], list[str]]:
    """(group summaries, baseline rows, warnings about runs left out of the statistics)."""
    runs = [load_run(p) for p in find_runs(paths)]
    groups = [summarize_group(name, members, window) for name, members in group_runs(runs).items()]
    return groups, [load_baseline(p) for p in baseline_paths], _left_out(runs)


# ---- paired mode ----------------------------------------------------------------------------------------------------


def probe_means(path: str, env_steps: int, tail: float = PROBE_TAIL) -> dict[str, float]:
    """A run's ``PROBES``, each the mean of its metrics.jsonl rows in the last ``tail`` of its ``env_steps``."""
    rows = [row for row in metrics_rows(path) if isinstance(row.get("env_steps"), (int, float))]
    start = (1 - tail) * env_steps
    out = {}
    for key in PROBES:
        values = [float(r[key]) for r in rows if r["env_steps"] >= start and isinstance(r.get(key), (int, float))]
        values = [v for v in values if math.isfinite(v)]
        if values:
            out[key] = float(np.mean(values))
    return out


def run_figures(run: dict) -> dict[str, tuple[str, float]]:
    """One evaluated run's figures for the paired table: name -> (kind: "score", "rate" or "plain", value), those it has."""
    out: dict[str, tuple[str, float]] = {}
    f = run["final"]
    summaries = [("last weights", f["last"]["summary"]), *((SECONDARY[k], s) for k, (_, s) in further(f).items())]
    for (prefix, s), (key, name, kind) in itertools.product(summaries, FIGURES):
        if s and s.get(key) is not None:
            out[f"{prefix}: {name}"] = (kind, float(s[key]))
    for c in clusters(f["last"]["hazards"]):
        if c.get("pass_rate") is not None:
            out[f"hazard {c['name']}: pass rate"] = ("rate", float(c["pass_rate"]))
    for key, value in probe_means(run["path"], f["env_steps"]).items():
        out[f"{key} (last {PROBE_TAIL:.0%} of env steps)"] = ("plain", value)
    return out


def _by_seed(label: str, runs: list[dict]) -> tuple[dict[int, dict], list[dict]]:
    """seed -> run of one group, and the runs without a seed; two runs of one seed are an error (which to pair?)."""
    seeded: dict[int, dict] = {}
    for r in runs:
        seed = run_seed(r["config"])
        if seed in seeded:
            raise UsageError(f"--paired: group {label!r} has two runs of seed {seed}: {seeded[seed]['path']} and {r['path']}")
        if seed is not None:
            seeded[seed] = r
    return seeded, [r for r in runs if run_seed(r["config"]) is None]


def _paired_metric(name: str, kind: str, seeds: list, fa: dict, fb: dict) -> dict:
    """One figure's row of the paired table: stats.py ``paired`` over the seeds both runs have it for."""
    p = paired({s: fa[s][name][1] for s in seeds if name in fa[s]}, {s: fb[s][name][1] for s in seeds if name in fb[s]})
    if kind == "rate" and p.ci:  # a difference of rates lies in [-1, 1]: clipping loses no coverage
        p.ci = [max(p.ci[0], -1.0), min(p.ci[1], 1.0)]
    return {
        "metric": name,
        "kind": kind,
        "n": p.n,
        **{k: v for k, v in dataclasses.asdict(p).items() if k not in ("only_a", "only_b")},
        "missing": sorted(set(seeds) - set(p.seeds)),
        "mde": [{"n": n, "mde": None if p.sd is None else mde_paired(p.sd, n)} for n in dict.fromkeys([p.n, *TIERS])],
    }


def earlier_figures(path: str, a_label: str, b_label: str) -> tuple[dict[int, dict], dict[int, dict], dict]:
    """An earlier paired report of the same A and B (its ``--json``): A's and B's ``run_figures`` per seed, and the report."""
    try:
        data = _read_json(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--earlier {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict) or not {"a", "b", "seeds", "metrics"} <= set(data):
        raise UsageError(
            f"--earlier {path}: not a paired report (no 'a', 'b', 'seeds' and 'metrics'; --paired A B --json writes one)"
        )
    if (data["a"], data["b"]) != (a_label, b_label):
        raise UsageError(f"--earlier {path}: it compares {data['a']!r} - {data['b']!r}, not {a_label!r} - {b_label!r}")
    fa: dict[int, dict] = {s: {} for s in data["seeds"]}
    fb: dict[int, dict] = {s: {} for s in data["seeds"]}
    for m in data["metrics"]:
        for seed, x, y in zip(m["seeds"], m["a"], m["b"]):
            fa[seed][m["metric"]], fb[seed][m["metric"]] = (m["kind"], float(x)), (m["kind"], float(y))
    return fa, fb, data


def paired_report(paths: list[str], a_label: str, b_label: str, earlier: tuple[str, ...] = ()) -> dict:
    """The paired comparison of two groups as a JSON-ready dict: the runs under ``paths`` and the ``earlier`` reports' seeds."""
    groups = group_runs([load_run(p) for p in find_runs(paths)]) if paths else {}
    if a_label == b_label:
        raise UsageError(f"--paired {a_label} {b_label}: name two different groups")
    for label in (a_label, b_label):
        if label not in groups and not earlier:
            raise UsageError(f"--paired: no group {label!r} among the runs (groups: {', '.join(map(repr, groups))})")
    # a run still training (no eval_final.json) is neither paired nor counted; the warnings name it
    runs_a, runs_b = ([r for r in groups.get(label, []) if r["final"] is not None] for label in (a_label, b_label))
    (a, a_none), (b, b_none) = _by_seed(a_label, runs_a), _by_seed(b_label, runs_b)
    here = sorted(set(a) & set(b))
    sides = ((a_label, a, b, a_none), (b_label, b, a, b_none))
    unmatched = [
        {"group": g, "seed": s, "path": mine[s]["path"]} for g, mine, other, _ in sides for s in sorted(set(mine) - set(other))
    ]
    unmatched += [{"group": g, "seed": None, "path": r["path"]} for g, _, _, none in sides for r in none]
    fa, fb = ({s: run_figures(side[s]) for s in here} for side in (a, b))
    source = dict.fromkeys(here, "the runs given")
    counts = [len(runs_a), len(runs_b)]
    for path in earlier:
        ea, eb, data = earlier_figures(path, a_label, b_label)
        clash = sorted(set(ea) & set(source))
        if clash:
            raise UsageError(f"--earlier {path}: seed {clash[0]} is already in the comparison, from {source[clash[0]]}")
        fa, fb = fa | ea, fb | eb
        source |= dict.fromkeys(ea, path)
        counts = [counts[0] + int(data.get("a_runs", len(ea))), counts[1] + int(data.get("b_runs", len(eb)))]
        unmatched += data.get("unmatched", [])
    seeds = sorted(fa)
    kinds = {name: kind for figures in [*fa.values(), *fb.values()] for name, (kind, _) in figures.items()}
    out = {"a": a_label, "b": b_label, "a_runs": counts[0], "b_runs": counts[1], "seeds": seeds, "earlier": list(earlier)}
    out |= {"unmatched": unmatched, "power": POWER, "alpha": ALPHA}
    out["metrics"] = [_paired_metric(name, kind, seeds, fa, fb) for name, kind in kinds.items()]
    return out | {"warnings": _left_out(groups.get(a_label, []) + groups.get(b_label, []))}


def _value(kind: str, x: float | None) -> str:
    return "-" if x is None else score_text(x) if kind == "score" else f"{x:.0%}" if kind == "rate" else f"{x:.3g}"


def _diff(kind: str, x: float | None, unit: bool = True) -> str:
    """A difference as the paired table prints it: rates in points, "pts" unless ``unit`` is False (an interval's bounds)."""
    if x is None:
        return "-"
    sign = "+" if x > 0 else ""
    if kind == "rate":
        return f"{sign}{rate_points(x)}" + (" pts" if unit else "")
    return f"{sign}{score_text(x)}" if kind == "score" else f"{sign}{x:.3g}"


def paired_markdown(p: dict) -> str:
    """The paired comparison: a line on the seeds, one summary row per figure, then the per-seed rows."""
    head = (
        f"Paired: A = {p['a']} ({p['a_runs']} runs), B = {p['b']} ({p['b_runs']} runs); "
        f"{len(p['seeds'])} seeds in both: {', '.join(map(str, p['seeds'])) or 'none'}."
    )
    if p.get("earlier"):
        head += f" Seeds from earlier paired reports as well: {', '.join(p['earlier'])}."
    if p["unmatched"]:
        left = [f"{u['group']} seed {u['seed'] if u['seed'] is not None else '(none)'} ({u['path']})" for u in p["unmatched"]]
        head += " Left out, no run of the same seed in the other group: " + "; ".join(left) + "."
    tiers = "".join(f" n={n} |" for n in TIERS)
    header = f"| figure | seeds | mean A - B [95% t CI] | A above B | SD of A - B | MDE (80% power, 95%): this n |{tiers}"
    lines = [head, "", header, "|---|---|---|---|---|---|" + "---|" * len(TIERS)]
    for m in p["metrics"]:
        kind = m["kind"]
        mean = _diff(kind, m["mean"])
        if m["mean"] is not None and m["ci"]:
            mean += f" [{_diff(kind, m['ci'][0], False)}, {_diff(kind, m['ci'][1], False)}]"
        signs = f"{m['positive']} of {m['n']}" + (f" ({m['ties']} tied)" if m["ties"] else "")
        mde = {e["n"]: e["mde"] for e in m["mde"]}
        spread = _diff(kind, m["sd"]).lstrip("+")
        cells = [_diff(kind, mde.get(n)).lstrip("+") for n in (m["n"], *TIERS)]
        missing = f" (no figure for seed {', '.join(map(str, m['missing']))})" if m["missing"] else ""
        lines.append(f"| {m['metric']}{missing} | {m['n']} | {mean} | {signs} | {spread} | {' | '.join(cells)} |")
    lines += ["", "| figure | seed | A | B | A - B |", "|---|---|---|---|---|"]
    for m in p["metrics"]:
        for seed, x, y, d in zip(m["seeds"], m["a"], m["b"], m["diffs"]):
            lines.append(f"| {m['metric']} | {seed} | {_value(m['kind'], x)} | {_value(m['kind'], y)} | {_diff(m['kind'], d)} |")
    return "\n".join(lines)


@dataclasses.dataclass
class ReportArgs:
    paths: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run folders, or folders holding run folders (one or more)."""
    baseline: Annotated[tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="JSON")] = ()
    """A launch.evaluate result (--policy random or constant) to show as a row; repeat it for more."""
    paired: Annotated[tuple[str, str], tyro.conf.arg(metavar="A_LABEL B_LABEL")] = ("", "")
    """Compare the groups A and B seed by seed (runs matched by config.json's seed) instead of the group tables."""
    earlier: Annotated[tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="JSON")] = ()
    """With --paired: an earlier paired report of the same A and B (its --json), whose seeds join; repeat it for more."""
    out: Annotated[str | None, tyro.conf.arg(metavar="PREFIX")] = None
    """Also write PREFIX.md and PREFIX.json."""
    json_path: Annotated[str | None, tyro.conf.arg(name="json", metavar="PATH")] = None
    """Also write the JSON (the groups, or with --paired the paired table) to PATH."""
    plot: Annotated[str | None, tyro.conf.arg(metavar="PNG")] = None
    """Draw the groups' evaluation curves with 95% t bands over runs."""
    end_window: float = END_WINDOW
    """Width in score units of the window where the per-run table finds most unsuccessful episodes' ends (Mario: 200)."""


def _write(args: ReportArgs, table: str, data: dict) -> None:
    """--out PREFIX: PREFIX.md and PREFIX.json; --json PATH: the JSON alone."""
    paths = [(args.out + ".md", table + "\n"), (args.out + ".json", None)] if args.out else []
    paths += [(args.json_path, None)] if args.json_path else []
    for path, text in paths:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, text if text is not None else json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(ReportArgs, argv, "python -m launch.tools.report", __doc__.split("\n")[0])
        if not args.paths and not args.earlier:
            raise UsageError("RUN_DIR: name at least one run folder")
        if args.earlier and not any(args.paired):
            raise UsageError("--earlier adds seeds to a paired comparison: give --paired A B with it")
        if not args.end_window > 0:
            raise UsageError(f"--end-window={args.end_window:g} must be a positive width in score units")
        if any(args.paired):
            if not all(args.paired):
                raise UsageError("--paired takes two group labels, A and B")
            if args.baseline or args.plot:
                raise UsageError("--paired compares two groups' runs seed by seed: no --baseline or --plot with it")
            data = paired_report(list(args.paths), *args.paired, earlier=args.earlier)
            table = paired_markdown(data)
        else:
            groups, baselines, warnings = report(list(args.paths), list(args.baseline), args.end_window)
            mde = mde_figures(groups)
            table = markdown(groups, baselines) + "\n\n" + mde_line(mde) + "\n\n" + per_run_markdown(groups)
            data = {"groups": groups, "baselines": baselines, "mde": mde, "warnings": warnings}
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in data["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    print(table)
    _write(args, table, data)
    if args.plot:
        plot_groups(groups, baselines, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
