"""Draw the README's pictures from the run folders that docs/media/pictures.json names (make docs).

    python -m launch.tools.pictures --runs-root runs    # rewrite docs/media/curve-1-1.png and agent-1-1.gif

The curve: the named runs' in-training evaluation score against env steps (mean line, range band) up to their final
last-weights row, baselines as flat lines. The GIF: the named run's best.pt playing one greedy episode (launch.evaluate).
Where a named folder is missing, the committed pictures stay.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from launch.cli import UsageError, parse
from shared.evaluation.names import read_metrics
from shared.evaluation.result import RESULT_NAME, load_result

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEDIA = os.path.join(ROOT, "docs", "media")
SPEC = os.path.join(MEDIA, "pictures.json")


@dataclass
class Args:
    runs_root: str = "runs"
    """The folder that holds the run folders pictures.json names."""


def score_points(run: str) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, mean score) of a run's in-training evaluations, then its final last-weights row."""
    rows, _ = read_metrics(os.path.join(run, "metrics.jsonl"))
    points = [(r["env_steps"], r["eval/score"]) for r in rows if "eval/score" in r]
    last = load_result(os.path.join(run, RESULT_NAME)).last
    points.append((last.env_steps, last.summary.score_mean))
    steps, scores = np.array(points, dtype=np.float64).T
    return steps, scores


def draw_curve(runs: list[str], label: str, baselines: dict[str, str], out: str) -> None:
    """Mean and range over ``runs`` on a common grid of env steps (each run interpolated), baselines as lines."""
    from matplotlib.figure import Figure

    series = [score_points(r) for r in runs]
    grid = np.linspace(max(s[0][0] for s in series), min(s[0][-1] for s in series), 50)
    ys = np.stack([np.interp(grid, s, y) for s, y in series])
    fig = Figure(figsize=(9, 4), dpi=110)
    ax = fig.subplots()
    ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.25, label=f"range over {len(runs)} seeds")
    ax.plot(grid, ys.mean(0), lw=2, label=f"{label}, mean")
    for (name, path), style in zip(baselines.items(), ("--", ":")):
        with open(os.path.join(ROOT, path)) as f:
            ax.axhline(json.load(f)["summary"]["score_mean"], color="0.3", ls=style, label=name)
    ax.set(xlabel="environment steps", ylabel="mean furthest x_pos, epsilon 0.05", title="Mario 1-1")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)  # outside: the band fills the axes
    fig.tight_layout()
    fig.savefig(out)


def film(run: str, out: str) -> None:
    """best.pt's greedy episode of ``run`` as a GIF, through launch.evaluate's own path."""
    from launch import evaluate

    argv = [run, "--episodes", "1", "--low-epsilon-episodes", "0", "--noop-episodes", "0", "--video", out]
    with tempfile.TemporaryDirectory() as tmp:  # the evaluation's JSON is not a picture
        if evaluate.main([*argv, "--video-episode", "greedy", "--json", os.path.join(tmp, "eval.json")]) != 0:
            raise RuntimeError(f"launch.evaluate {' '.join(argv)} failed")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(Args, argv, "python -m launch.tools.pictures", description=__doc__)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with open(SPEC) as f:
        spec = json.load(f)
    curve, gif = spec["curve"], spec["gif"]
    runs = [os.path.join(args.runs_root, r) for r in curve["runs"]]
    missing = [r for r in [*runs, os.path.join(args.runs_root, gif["run"])] if not os.path.isdir(r)]
    if missing:
        print(f"pictures: kept the committed ones; not here: {', '.join(missing)}")
        return 0
    draw_curve(runs, curve["label"], curve["baselines"], os.path.join(MEDIA, "curve-1-1.png"))
    film(os.path.join(args.runs_root, gif["run"]), os.path.join(MEDIA, "agent-1-1.gif"))
    print(f"pictures: wrote docs/media/curve-1-1.png ({len(runs)} runs) and docs/media/agent-1-1.gif ({gif['run']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
