"""Compare groups of runs on their final evaluations, with confidence intervals; or two groups seed by seed.

    python -m launch.tools.report runs/lr1e-4-* runs/baseline-*            # run folders (or folders of run folders)
    python -m launch.tools.report runs/ --baseline random.json --baseline right-A.json --out docs/lab/experiments/1-1
    python -m launch.tools.report --paired lr1e-4 baseline runs/ --json paired.json   # A - B on the seeds both ran

Runs are grouped by ``--label`` (given at launch) or, where no run has one, by the config values in which the runs
differ (seeds, ports, folders and log options excepted). Per group: the number of runs, env steps, the machines
(CPU model, and whether it has native bf16), env steps/s, samples trained per transition, each run's
final-evaluation mean score and success rate (``eval_final.json`` of launch/final_eval.py: the last weights and
best.pt; Mario's score is the furthest x_pos, its success the flag), and over the runs the mean of the last weights'
mean score and of their success rate, each with a 95% interval:

- **two or more runs: the Student t interval over runs** (launch/tools/stats.py ``t_interval``, n - 1 degrees of
  freedom; "95% t over 3 runs"). One rule for every group size: a percentile bootstrap over 3-5 numbers is little
  more than their range (about 75% coverage for 3 runs), and one method for 6+ runs keeps rows comparable. Rates'
  intervals are clipped to [0, 1], which loses no coverage.
- **one run: that run's own interval over its episodes** ("95% over 50 episodes (one run)": the final
  evaluation's BCa bootstrap of the mean score, Wilson for the success rate); it says nothing of seed-to-seed
  spread.

No interquartile mean: with 5 runs or fewer it is the mean (3 runs: scipy trims none) or the mean of the middle 2-3
runs, and no interval of it at that size has a coverage to claim; each run's figure is in the table instead.
Where the final evaluation wrote them, a group has further rows, each the same statistics over its runs: the late
window (the kept last weights, ``late_window``), the low-epsilon and no-op greedy rows (``secondary``) and each hazard
cluster's pass rate (``last.hazards``, by name). Under the table, one line gives the minimum detectable effect
(80% power, two-sided 5%, from the pooled SD between runs of the last weights' score and success rate) of two
groups of the sizes given (each group against the first, and the protocol's 4 vs 4 and 6 vs 6 runs).
Baselines (``--baseline``: JSON files of ``launch.evaluate --policy random`` or ``--policy constant``) are rows of
their own, their intervals over episodes, with their ``secondary`` and ``hazards`` rows where the file has them.

A second table lists each run: its seed, the last weights' and best.pt's mean score with its interval over
episodes, and where the episodes that did not succeed cluster: the ``--end-window`` (200 by default, in score units)
holding most of their ends, with its count ("35 of 50 end at 600-720": a policy that fails at one hazard, such as 1-1's
first goomba, rather than across the stage).

``--paired A B`` compares the groups labelled A and B run by run: runs are matched by their seed (config.json's
``seed``), seeds only one group ran are listed and left out. For each figure (the last weights' score and success
rate, the late window's, the low-epsilon and no-op rows', each hazard's pass rate, and the probe figures of
metrics.jsonl, ``probe/churn``, ``probe/gap``, ``probe/gap_relative``, each run's mean over the last 20% of its env
steps): the per-seed A, B and A - B, the mean difference with its 95% t interval over seeds, the sign count (A
above B on k of n seeds, ties apart), the SD of the differences and the minimum detectable difference at 80% power
for this many seeds and for 4 and 6 (stats.py ``mde_paired``). Pairing removes what the seed alone decides, so it
detects smaller effects than two unpaired groups of the same size when runs of one seed agree.

Printed as Markdown tables; ``--out PREFIX`` also writes PREFIX.md and PREFIX.json, ``--json PATH`` the JSON alone.
``--plot PNG`` draws each group's in-training evaluation curve (``eval/score`` of metrics.jsonl, each run
interpolated onto a common grid of env steps) as the mean over runs with a 95% t band over runs, the baselines as
horizontal lines. Bad input (a folder that is no run, a run without a final evaluation) is named on stderr; such runs
are listed and left out of the statistics, and a folder that is neither a run nor holds any exits with 2. Files
written under Mario's words (``x_pos_mean``, ``flag_rate``: runs before the names were generic) are read through
``shared.results.upgrade``. Files from before the late window, secondary rows and hazards report as before.
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
from launch.final_eval import RESULT_NAME, describe
from launch.machine import MACHINE_NAME
from launch.tools.stats import ALPHA, POWER, mde_paired, mde_two_groups, paired, pooled_sd, t_interval
from shared.results import read_metrics, upgrade

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
TIERS = (4, 6)  # the protocol's group sizes: the minimum detectable effects are given for these too
PROBES = ("probe/churn", "probe/gap", "probe/gap_relative")  # metrics.jsonl, written at every weight broadcast
PROBE_TAIL = 0.2  # a run's probe figure: the mean of its rows in this last fraction of its env steps
SECONDARY = ("late_window", "low_epsilon", "noop_greedy")  # the further evaluations' keys, in the tables' order


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


def run_seed(config: dict) -> int | None:
    """A run's seed (flattened config.json): ``seed`` as saved (the launcher draws and saves one), else, for a config
    saved with -1, the seed it resolves to (each component's seed); None when there is none."""
    for key in ("seed", "learner.seed", "actor.seed", "eval.seed"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


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


def over_runs(values: list[float], rate: bool = False) -> tuple[float | None, list[float] | None]:
    """(mean, 95% t interval over runs) of one figure per run; no interval for one run, nothing for none. A
    ``rate``'s interval is clipped to [0, 1]."""
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
    """The CPU's model name and whether it has native bf16: the two machine kinds of one model name
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
    rows = metrics_rows(path)
    ratios = [row["learner/replay_ratio"] for row in rows if "learner/replay_ratio" in row]
    return ratios[-1] if ratios else None


def metrics_rows(path: str) -> list[dict]:
    """A run folder's metrics.jsonl rows (shared/results.py ``read_metrics``): a last line cut short by a stopped run
    is left out with a note on stderr; a file that cannot be read gives no rows."""
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
    entry = {**part["summary"], "weights_version": part.get("weights_version"), "env_steps": part.get("env_steps")}
    if part.get("episodes"):  # older files lack the episodes: no "ends" then
        entry["ends"] = densest_end(part["episodes"], window)
    return entry


def _g(value: Any, fmt: str = "g") -> str:
    return "?" if value is None else format(value, fmt)


def further(data: dict | None) -> dict[str, tuple[str, dict]]:
    """key -> (row name, summary) of the further evaluations a result holds (eval_final.json's ``late_window`` and
    ``secondary``, a baseline's ``secondary``); those absent, null or without a summary are left out."""
    out: dict[str, tuple[str, dict]] = {}
    if not data:
        return out
    late = data.get("late_window")
    if isinstance(late, dict) and late.get("summary"):
        weights = late.get("weights") or []
        each = _g(late.get("episodes_per_weights"))
        name = f"late window (epsilon {_g(late.get('epsilon'))}, {len(weights)} weights x {each} episodes)"
        out["late_window"] = (name, late["summary"])
    secondary = data.get("secondary") or {}
    low = secondary.get("low_epsilon")
    if isinstance(low, dict) and low.get("summary"):
        out["low_epsilon"] = (f"low epsilon ({_g(low.get('epsilon'))})", low["summary"])
    noop = secondary.get("noop_greedy")
    if isinstance(noop, dict) and noop.get("summary"):
        out["noop_greedy"] = (f"no-op greedy (0-{_g(noop.get('noop_max'))} no-ops, then epsilon 0)", noop["summary"])
    return out


def clusters(hazards: dict | None) -> list[dict]:
    """The hazard clusters of a ``hazards`` entry (none for the histogram kind or an absent entry)."""
    if not isinstance(hazards, dict) or hazards.get("kind") != "clusters":
        return []
    return [c for c in hazards.get("clusters") or [] if isinstance(c, dict) and "name" in c]


def hazard_name(cluster: dict) -> str:
    x = cluster.get("x")
    where = f" (x {score_text(x[0])}-{score_text(x[1])})" if isinstance(x, list) and len(x) == 2 else ""
    return f"hazard {cluster['name']}{where}: pass rate"


def group_rows(done: list[dict]) -> list[dict]:
    """The further rows of a group: each further evaluation and each hazard's pass rate, over its evaluated runs."""
    rows = []
    for key in SECONDARY:
        parts = [further(r["final"]).get(key) for r in done]
        present = [p for p in parts if p]
        if not present:
            continue
        xs = [p[1]["score_mean"] for p in present]
        rates = [p[1]["success_rate"] for p in present]
        score, score_ci = over_runs(xs)
        rate, rate_ci = over_runs(rates, rate=True)
        if len(present) == 1:  # one run: its own interval over episodes
            score_ci, rate_ci = present[0][1].get("score_ci"), present[0][1].get("success_rate_ci")
        rows.append(
            {
                "key": key,
                "row": present[0][0],
                "runs": len(present),
                "per_run": [
                    None if p is None else {"score_mean": p[1]["score_mean"], "success_rate": p[1]["success_rate"]} for p in parts
                ],
                "score_mean": score,
                "score_mean_ci": score_ci,
                "success_rate_mean": rate,
                "success_rate_ci": rate_ci,
                "interval": interval_label(len(present), present[0][1].get("episodes")),
            }
        )
    names: dict[str, dict] = {}  # cluster name -> the first run's cluster (its x range)
    for r in done:
        for c in clusters(r["final"]["last"].get("hazards")):
            names.setdefault(c["name"], c)
    for name, first in names.items():
        per_run = [
            next((c.get("pass_rate") for c in clusters(r["final"]["last"].get("hazards")) if c["name"] == name), None)
            for r in done
        ]
        values = [float(v) for v in per_run if v is not None]
        mean, ci = over_runs(values, rate=True)
        rows.append(
            {
                "key": "hazard",
                "row": hazard_name(first),
                "name": name,
                "x": first.get("x"),
                "runs": len(values),
                "per_run": per_run,
                "pass_rate_mean": mean,
                "pass_rate_ci": ci,
                "interval": interval_label(len(values)) if len(values) != 1 else "one run",
            }
        )
    return rows


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
                "seed": run_seed(r["config"]),
                "cpu": cpu_label(m),
                "env_steps": f["env_steps"] if f else None,
                "samples_per_transition": replay_ratio(r["path"], f),
                "env_steps_per_s": (f["env_steps"] / wall) if f and wall else None,
                "last": evaluated(f["last"], window) if f else None,
                "best": evaluated(f.get("best"), window) if f else None,
            }
        )
    score, score_ci = over_runs(xs)
    rate, rate_ci = over_runs(rates, rate=True)
    if len(last) == 1:  # one run: its own interval over episodes, labelled so
        score_ci, rate_ci = last[0].get("score_ci"), last[0].get("success_rate_ci")
    return {
        "group": name,
        "runs": len(runs),
        "evaluated": len(done),
        "per_run": per_run,
        "env_steps": sorted({p["env_steps"] for p in per_run if p["env_steps"] is not None}),
        "cpus": sorted({p["cpu"] for p in per_run if p["cpu"]}),
        "score_mean": score,
        "score_mean_ci": score_ci,
        "success_rate_mean": rate,
        "success_rate_ci": rate_ci,
        "interval": interval_label(len(last), last[0].get("episodes") if last else None),
        "best_score_mean": float(np.mean([s["score_mean"] for s in best])) if best else None,
        "best_success_rate_mean": float(np.mean([s["success_rate"] for s in best])) if best else None,
        "rows": group_rows(done),
    }


def baseline_rows(data: dict) -> list[dict]:
    """A baseline file's further rows: its ``secondary`` evaluations and its ``hazards`` pass rates, over episodes."""
    rows = []
    for key, (name, s) in further({"secondary": data.get("secondary")}).items():
        rows.append(
            {
                "key": key,
                "row": name,
                "episodes": s.get("episodes"),
                "score_mean": s["score_mean"],
                "score_mean_ci": s.get("score_ci"),
                "success_rate_mean": s["success_rate"],
                "success_rate_ci": s.get("success_rate_ci"),
                "interval": f"95% over {s.get('episodes')} episodes",
            }
        )
    for c in clusters(data.get("hazards")):
        rows.append(
            {
                "key": "hazard",
                "row": hazard_name(c),
                "name": c["name"],
                "x": c.get("x"),
                "reached": c.get("reached"),
                "ended": c.get("ended"),
                "pass_rate_mean": c.get("pass_rate"),
                "pass_rate_ci": None,
                "interval": "-",
            }
        )
    return rows


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
    try:
        rows = baseline_rows(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"--baseline={path!r}: malformed secondary or hazards entry ({exc!r})") from None
    return {
        "group": group,
        "path": path,
        "episodes": d["episodes"],
        "score_mean": d["score_mean"],
        "score_mean_ci": d["score_ci"],
        "success_rate_mean": d["success_rate"],
        "success_rate_ci": d["success_rate_ci"],
        "interval": f"95% over {d['episodes']} episodes",
        "stage": data.get("stage"),
        "rows": rows,
    }


def score_text(x: float) -> str:
    """A score as the tables print it: whole above 100 (Mario's 1,717), three significant digits below (a return of
    -0.45)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def rate_points(x: float) -> str:
    """A difference of rates in percentage points: whole from 10 points up, one decimal below, 0 for none."""
    p = round(100 * x, 1)
    return "0" if p == 0 else f"{p:.0f}" if abs(p) >= 10 else f"{p:.1f}"


def _ci(v: list[float] | None, fmt: str | Callable[[float], str]) -> str:
    show = fmt if callable(fmt) else (lambda x: format(x, fmt))
    return f" [{show(v[0])}, {show(v[1])}]" if v else ""


def _rate(x: float | None, ci: list[float] | None) -> str:
    return "-" if x is None else f"{x:.0%}{_ci(ci, '.0%')}"


def _score(x: float | None, ci: list[float] | None) -> str:
    return "-" if x is None else f"{score_text(x)}{_ci(ci, score_text)}"


def row_markdown(owner: str, count: str, row: dict) -> str:
    """One further row of a group or baseline, in the group table's columns."""
    if row["key"] == "hazard":
        if "per_run" in row:
            each = ", ".join("-" if v is None else f"{v:.0%}" for v in row["per_run"])
        else:
            each = f"{_g(row.get('reached'))} reached, {_g(row.get('ended'))} ended there"
        score, rate = "-", _rate(row["pass_rate_mean"], row["pass_rate_ci"])
    else:
        if "per_run" in row:
            each = ", ".join(
                "-" if p is None else f"{score_text(p['score_mean'])} ({p['success_rate']:.0%})" for p in row["per_run"]
            )
        else:
            each = "-"
        score = _score(row["score_mean"], row["score_mean_ci"])
        rate = _rate(row["success_rate_mean"], row["success_rate_ci"])
    return f"| {owner}: {row['row']} | {count} | - | - | - | - | {each} | {score} | {rate} | {row['interval']} | - |"


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
            f"| {', '.join(f'{r:.2f}' for r in ratios) or '-'} | {each} "
            f"| {_score(g['score_mean'], g['score_mean_ci'])} | {_rate(g['success_rate_mean'], g['success_rate_ci'])} "
            f"| {g['interval']} | {best} |"
        )
        lines.extend(row_markdown(g["group"], f"{row['runs']}/{g['evaluated']}", row) for row in g.get("rows", []))
    for b in baselines:
        lines.append(
            f"| {b['group']} | {b['episodes']} episodes | - | - | - | - | - "
            f"| {_score(b['score_mean'], b['score_mean_ci'])} | {_rate(b['success_rate_mean'], b['success_rate_ci'])} "
            f"| {b['interval']} | - |"
        )
        lines.extend(
            row_markdown(b["group"], f"{_g(row.get('episodes'))} episodes" if row["key"] != "hazard" else "-", row)
            for row in b.get("rows", [])
        )
    return "\n".join(lines)


def mde_figures(groups: list[dict]) -> dict | None:
    """The minimum detectable effects (80% power, two-sided 5%) of two unpaired groups: the pooled SD between runs
    of the last weights' score and success rate (groups of 2+ evaluated runs), and per pair of sizes (each group
    against the first, then the protocol's tiers) the smallest difference of means detected. None without an SD."""
    scores = [[p["last"]["score_mean"] for p in g["per_run"] if p["last"]] for g in groups]
    rates = [[p["last"]["success_rate"] for p in g["per_run"] if p["last"]] for g in groups]
    sd_score, sd_rate = pooled_sd(scores), pooled_sd(rates)
    if sd_score is None or sd_rate is None:
        return None
    sizes = [len(s) for s in scores if s]
    pairs = [(sizes[0], n) for n in sizes[1:]] or [(sizes[0], sizes[0])]
    pairs = list(dict.fromkeys(pairs + [(n, n) for n in TIERS]))
    return {
        "sd_score": sd_score,
        "sd_success_rate": sd_rate,
        "power": POWER,
        "alpha": ALPHA,
        "pairs": [
            {"runs": [n1, n2], "score": mde_two_groups(sd_score, n1, n2), "success_rate": mde_two_groups(sd_rate, n1, n2)}
            for n1, n2 in pairs
        ],
    }


def mde_line(mde: dict | None) -> str:
    """The line under the group table: the minimum detectable effect for the group sizes given."""
    if mde is None:
        return "MDE: no group has two evaluated runs, so there is no SD between runs to size it from."
    parts = [
        f"{p['runs'][0]} vs {p['runs'][1]} runs: "
        + (
            "-"
            if p["score"] is None
            else f"{score_text(p['score'])} score, {rate_points(p['success_rate'])} points of success rate"
        )
        for p in mde["pairs"]
    ]
    return (
        f"MDE (80% power, 95%; pooled SD between runs {score_text(mde['sd_score'])} score, "
        f"{rate_points(mde['sd_success_rate'])} points of success rate): " + "; ".join(parts)
    )


def eval_curve(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, mean score) of a run's in-training evaluations (metrics.jsonl rows with eval/score)."""
    xs, ys = [], []
    for row in metrics_rows(path):
        if "eval/score" in row:
            xs.append(row["env_steps"])
            ys.append(row["eval/score"])
    order = np.argsort(xs, kind="stable")
    return np.asarray(xs, np.float64)[order], np.asarray(ys, np.float64)[order]


def plot_groups(groups: list[dict], baselines: list[dict], out: str, points: int = 40) -> None:
    """Each group's mean evaluation curve over its runs with a 95% t band over runs (module docstring)."""
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
            band = np.array([t_interval(col, CONFIDENCE)[1:] for col in ys.T], dtype=np.float64)
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


def _left_out(runs: list[dict]) -> list[str]:
    return [
        f"{r['path']}: no {RESULT_NAME} (run python -m launch.final_eval {r['path']}); left out"
        for r in runs
        if r["final"] is None
    ]


def report(paths: list[str], baseline_paths: list[str], window: float = END_WINDOW) -> tuple[list[dict], list[dict], list[str]]:
    """(group summaries, baseline rows, warnings about runs left out of the statistics)."""
    runs = [load_run(p) for p in find_runs(paths)]
    groups = [summarize_group(name, members, window) for name, members in group_runs(runs).items()]
    return groups, [load_baseline(p) for p in baseline_paths], _left_out(runs)


# ---- paired mode ----------------------------------------------------------------------------------------------------


def probe_means(path: str, env_steps: int | None = None, tail: float = PROBE_TAIL) -> dict[str, float]:
    """A run's probe figures (``PROBES``): each one's mean over the metrics.jsonl rows in the last ``tail`` of the
    run's env steps (``env_steps``: the run's total, else the largest env steps a row has)."""
    rows = [row for row in metrics_rows(path) if isinstance(row.get("env_steps"), (int, float))]
    if env_steps is not None:
        rows = [row for row in rows if any(key in row for key in PROBES)]
    if not rows:
        return {}
    total = env_steps if env_steps is not None else max(r["env_steps"] for r in rows)
    start = (1 - tail) * total
    out = {}
    for key in PROBES:
        values = [float(r[key]) for r in rows if r["env_steps"] >= start and isinstance(r.get(key), (int, float))]
        values = [v for v in values if math.isfinite(v)]
        if values:
            out[key] = float(np.mean(values))
    return out


def run_figures(run: dict) -> dict[str, tuple[str, float]]:
    """One run's figures for the paired table: name -> (kind: "score", "rate" or "plain", value); those the run
    lacks are absent."""
    out: dict[str, tuple[str, float]] = {}
    f = run["final"]

    def summary(prefix: str, s: dict | None) -> None:
        if s and s.get("score_mean") is not None:
            out[f"{prefix}: score mean"] = ("score", float(s["score_mean"]))
        if s and s.get("success_rate") is not None:
            out[f"{prefix}: success rate"] = ("rate", float(s["success_rate"]))

    if f:
        summary("last weights", f["last"]["summary"])
        names = {"late_window": "late window", "low_epsilon": "low epsilon", "noop_greedy": "no-op greedy"}
        for key, (_, s) in further(f).items():
            summary(names[key], s)
        for c in clusters(f["last"].get("hazards")):
            if c.get("pass_rate") is not None:
                out[f"hazard {c['name']}: pass rate"] = ("rate", float(c["pass_rate"]))
    for key, value in probe_means(run["path"], f.get("env_steps") if f else None).items():
        out[f"{key} (last {PROBE_TAIL:.0%} of env steps)"] = ("plain", value)
    return out


def _by_seed(label: str, runs: list[dict]) -> tuple[dict[int, dict], list[dict]]:
    """seed -> run of one group, and the runs without a seed; two runs of one seed are an error (which to pair?)."""
    seeded: dict[int, dict] = {}
    unseeded = []
    for r in runs:
        seed = run_seed(r["config"])
        if seed is None:
            unseeded.append(r)
        elif seed in seeded:
            raise UsageError(f"--paired: group {label!r} has two runs of seed {seed}: {seeded[seed]['path']} and {r['path']}")
        else:
            seeded[seed] = r
    return seeded, unseeded


def paired_report(paths: list[str], a_label: str, b_label: str) -> dict:
    """The paired comparison of the groups ``a_label`` and ``b_label`` (module docstring), as a JSON-ready dict."""
    runs = [load_run(p) for p in find_runs(paths)]
    groups = group_runs(runs)
    if a_label == b_label:
        raise UsageError(f"--paired {a_label} {b_label}: name two different groups")
    for label in (a_label, b_label):
        if label not in groups:
            raise UsageError(f"--paired: no group {label!r} among the runs (groups: {', '.join(map(repr, groups))})")
    a, a_none = _by_seed(a_label, groups[a_label])
    b, b_none = _by_seed(b_label, groups[b_label])
    seeds = sorted(set(a) & set(b))
    unmatched = [{"group": a_label, "seed": s, "path": a[s]["path"]} for s in sorted(set(a) - set(b))]
    unmatched += [{"group": b_label, "seed": s, "path": b[s]["path"]} for s in sorted(set(b) - set(a))]
    unmatched += [
        {"group": label, "seed": None, "path": r["path"]} for label, rs in ((a_label, a_none), (b_label, b_none)) for r in rs
    ]
    fa = {s: run_figures(a[s]) for s in seeds}
    fb = {s: run_figures(b[s]) for s in seeds}
    kinds: dict[str, str] = {}
    for figures in [*fa.values(), *fb.values()]:
        for name, (kind, _) in figures.items():
            kinds.setdefault(name, kind)
    metrics = []
    for name, kind in kinds.items():
        p = paired({s: fa[s][name][1] for s in seeds if name in fa[s]}, {s: fb[s][name][1] for s in seeds if name in fb[s]})
        if kind == "rate" and p.ci:  # a difference of rates lies in [-1, 1]: clipping loses no coverage
            p.ci = [max(p.ci[0], -1.0), min(p.ci[1], 1.0)]
        sizes = list(dict.fromkeys([p.n, *TIERS]))
        metrics.append(
            {
                "metric": name,
                "kind": kind,
                "n": p.n,
                **{k: v for k, v in dataclasses.asdict(p).items() if k not in ("only_a", "only_b")},
                "missing": sorted(set(seeds) - set(p.seeds)),
                "mde": [{"n": n, "mde": None if p.sd is None else mde_paired(p.sd, n)} for n in sizes],
            }
        )
    return {
        "a": a_label,
        "b": b_label,
        "a_runs": len(groups[a_label]),
        "b_runs": len(groups[b_label]),
        "seeds": seeds,
        "unmatched": unmatched,
        "power": POWER,
        "alpha": ALPHA,
        "metrics": metrics,
        "warnings": _left_out(groups[a_label] + groups[b_label]),
    }


def _value(kind: str, x: float | None) -> str:
    if x is None:
        return "-"
    return score_text(x) if kind == "score" else f"{x:.0%}" if kind == "rate" else f"{x:.3g}"


def _diff(kind: str, x: float | None, unit: bool = True) -> str:
    """A difference (or a spread of differences) as the paired table prints it: rates in points ("pts" unless
    ``unit`` is False: an interval's bounds)."""
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
    if p["unmatched"]:
        head += (
            " Left out, no run of the same seed in the other group: "
            + "; ".join(
                f"{u['group']} seed {u['seed'] if u['seed'] is not None else '(none)'} ({u['path']})" for u in p["unmatched"]
            )
            + "."
        )
    lines = [
        head,
        "",
        "| figure | seeds | mean A - B [95% t CI] | A above B | SD of A - B | MDE (80% power, 95%): this n | "
        + " | ".join(f"n={n}" for n in TIERS)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(TIERS),
    ]
    for m in p["metrics"]:
        kind = m["kind"]
        mean = (
            "-"
            if m["mean"] is None
            else _diff(kind, m["mean"])
            + (f" [{_diff(kind, m['ci'][0], False)}, {_diff(kind, m['ci'][1], False)}]" if m["ci"] else "")
        )
        signs = f"{m['positive']} of {m['n']}" + (f" ({m['ties']} tied)" if m["ties"] else "")
        mde = {e["n"]: e["mde"] for e in m["mde"]}
        spread = "-" if m["sd"] is None else _diff(kind, m["sd"]).lstrip("+")
        cells = ["-" if mde.get(n) is None else _diff(kind, mde[n]).lstrip("+") for n in (m["n"], *TIERS)]
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
    """Compare the groups A and B seed by seed (runs matched by config.json's seed) instead of the group tables:
    per figure the per-seed A - B, their mean with its 95% t interval, the sign count, their SD and the minimum
    detectable difference."""
    out: Annotated[str | None, tyro.conf.arg(metavar="PREFIX")] = None
    """Also write PREFIX.md and PREFIX.json."""
    json_path: Annotated[str | None, tyro.conf.arg(name="json", metavar="PATH")] = None
    """Also write the JSON (the groups, or with --paired the paired table) to PATH."""
    plot: Annotated[str | None, tyro.conf.arg(metavar="PNG")] = None
    """Draw the groups' evaluation curves with 95% t bands over runs."""
    end_window: float = END_WINDOW
    """Width in score units of the window in which the per-run table finds where most unsuccessful episodes end
    (on Mario 200 is about one hazard of 1-1)."""


def _write(args: ReportArgs, table: str, data: dict) -> None:
    """--out PREFIX: PREFIX.md and PREFIX.json; --json PATH: the JSON alone."""
    paths = [(args.out + ".md", table + "\n"), (args.out + ".json", None)] if args.out else []
    paths += [(args.json_path, None)] if args.json_path else []
    for path, text in paths:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text if text is not None else json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(ReportArgs, argv, "python -m launch.tools.report", __doc__.split("\n")[0])
        if not args.paths:
            raise UsageError("RUN_DIR: name at least one run folder")
        if not args.end_window > 0:
            raise UsageError(f"--end-window={args.end_window:g} must be a positive width in score units")
        is_paired = any(args.paired)
        if is_paired and not all(args.paired):
            raise UsageError("--paired takes two group labels, A and B")
        if is_paired and (args.baseline or args.plot):
            raise UsageError("--paired compares two groups' runs seed by seed: no --baseline or --plot with it")
        if is_paired:
            result = paired_report(list(args.paths), *args.paired)
            warnings = result["warnings"]
        else:
            groups, baselines, warnings = report(list(args.paths), list(args.baseline), args.end_window)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    if is_paired:
        table = paired_markdown(result)
        data = result
    else:
        mde = mde_figures(groups)
        table = markdown(groups, baselines) + "\n\n" + mde_line(mde) + "\n\n" + per_run_markdown(groups)
        data = {"groups": groups, "baselines": baselines, "mde": mde, "warnings": warnings}
    print(table)
    _write(args, table, data)
    if args.plot:
        plot_groups(groups, baselines, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
