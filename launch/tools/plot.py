"""Draw learning curves from one or more runs' ``metrics.jsonl`` into one PNG.

    python -m launch.tools.plot runs/a runs/b --out curves.png --names apex,baseline --baseline-score 734

Each argument is a run folder holding ``metrics.jsonl`` or a path to a ``.jsonl`` file. A row with an ``eval/`` key
is an evaluation row, any other an epoch row; rows without a numeric ``env_steps`` are skipped with a warning, and a
malformed file or a folder without ``metrics.jsonl`` is an error (exit 2). The PNG has five rows of panels against env
steps (left) and wall-clock minutes (right): evaluation score, success rate, behaviour-policy return, loss and TD error,
throughput; one colour per run, "no data" where no run has the figure.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, cast

import matplotlib
import tyro
from matplotlib.figure import Figure  # no pyplot: nothing global, never a window
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, LogFormatter, PercentFormatter

from launch.cli import UsageError, parse
from shared.evaluation.names import read_metrics

if TYPE_CHECKING:  # types only: matplotlib.typing is 3.8+, setup.cfg asks >= 3.7
    from collections.abc import Sequence

    from matplotlib.typing import RcKeyType

# x columns: (row key, axis label, scale applied to the value)
X_COLUMNS = [("env_steps", "environment steps", 1.0), ("wall_seconds", "wall-clock minutes", 1.0 / 60.0)]

FONTS: dict[RcKeyType, Any] = {
    "font.size": 12,
    "axes.titlesize": 13,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "figure.titlesize": 16,
}
GREY = "0.3"  # the style legends' lines: colours stand for runs


@dataclass
class Run:
    name: str
    path: str
    epochs: list[dict]
    evals: list[dict]
    skipped: int  # rows without env_steps


def is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metrics_path(arg: str) -> str:
    """The metrics file for a positional argument: RUN_DIR/metrics.jsonl, or the file itself."""
    if os.path.isdir(arg):
        path = os.path.join(arg, "metrics.jsonl")
        if not os.path.isfile(path):
            raise UsageError(f"{arg}: no metrics.jsonl in this run folder")
        return path
    if os.path.isfile(arg):
        return arg
    raise UsageError(f"{arg}: no such run folder or metrics file")


def default_name(arg: str) -> str:
    """The folder's basename; for a file, its folder's name if it is metrics.jsonl, else its stem."""
    path = os.path.normpath(os.path.abspath(arg))
    if os.path.isfile(path):
        if os.path.basename(path) == "metrics.jsonl":
            return os.path.basename(os.path.dirname(path))
        return os.path.splitext(os.path.basename(path))[0]
    return os.path.basename(path)


def read_run(arg: str, name: str) -> Run:
    path = metrics_path(arg)
    try:
        rows, note = read_metrics(path)
    except (ValueError, OSError) as exc:  # read_metrics' ValueErrors name the file
        raise UsageError(str(exc) if str(exc).startswith(path) else f"{path}: cannot read ({exc})") from None
    if note:
        print(f"note: {note}", file=sys.stderr)
    kept = [row for row in rows if is_number(row.get("env_steps"))]
    evals = [row for row in kept if any(key.startswith("eval/") for key in row)]
    epochs = [row for row in kept if not any(key.startswith("eval/") for key in row)]
    return Run(name, path, epochs, evals, skipped=len(rows) - len(kept))


def series(rows: list[dict], key: str, xkey: str, xscale: float) -> tuple[list[float], list[float]]:
    """(x, y) for the rows where both xkey and key hold finite numbers, in file order."""
    pairs = [(x, y) for x, y in ((row.get(xkey), row.get(key)) for row in rows) if is_number(x) and is_number(y)]
    return [x * xscale for x, _ in pairs], [float(y) for _, y in pairs]


def draw(runs, colours, xcol, ax, kind, key, linestyle="-", linewidth=1.8, marker=None) -> list[float]:
    """Plot one metric for every run on ax; return all y values drawn (empty: nothing drawn)."""
    xkey, _, xscale = xcol
    drawn = []
    for run, colour in zip(runs, colours):
        xs, ys = series(getattr(run, kind), key, xkey, xscale)
        if xs:
            shape = marker or ("o" if len(xs) == 1 else None)
            ax.plot(xs, ys, color=colour, linestyle=linestyle, linewidth=linewidth, marker=shape, markersize=3.5)
            drawn.extend(ys)
    return drawn


def no_data(ax) -> None:
    ax.set_yticks([])
    ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=14, color="0.45")


def style_legend(ax, entries) -> None:
    """A small legend of line styles (grey), since colours already stand for runs."""
    handles = [Line2D([], [], color=colour, linestyle=style, linewidth=width) for _, style, width, colour in entries]
    ax.legend(handles, [label for label, _, _, _ in entries], loc="best", framealpha=0.8)


def _column(axes, line, baseline_score: float | None, baseline_label: str) -> None:
    """The five panels of one column; ``line(ax, kind, key, style, width, marker=None)`` draws one metric."""
    score_ax, rate_ax, return_ax, loss_ax, speed_ax = axes
    mean = line(score_ax, "evals", "eval/score", "-", 2.2, marker="o")
    median = line(score_ax, "evals", "eval/score_median", "--", 1.1)
    score_ax.set(title="evaluation score (Mario: furthest x_pos)", ylabel="score")
    if mean or median:
        entries = [("mean", "-", 2.2, GREY), ("median", "--", 1.1, GREY)]
        if baseline_score is not None:
            score_ax.axhline(baseline_score, color="0.25", linestyle=":", linewidth=1.5)
            entries.append((f"{baseline_label} ({baseline_score:g})", ":", 1.5, "0.25"))
        style_legend(score_ax, entries)
    else:
        no_data(score_ax)

    if line(rate_ax, "evals", "eval/success_rate", "-", 2.0, marker="o"):
        rate_ax.set_ylim(-0.03, 1.03)
        rate_ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    else:
        no_data(rate_ax)
    rate_ax.set(title="evaluation success rate (Mario: flags)", ylabel="episodes that succeeded")

    if not line(return_ax, "epochs", "actor/return", "-", 1.8):
        no_data(return_ax)
    return_ax.set(title="behaviour-policy return (rolling mean, last 100 episodes)", ylabel="return")

    loss = line(loss_ax, "epochs", "learner/loss", "-", 1.8)
    td = line(loss_ax, "epochs", "learner/td_error", "--", 1.2)
    if loss or td:
        if all(v > 0 for v in loss + td):
            loss_ax.set_yscale("log")
            loss_ax.yaxis.set_major_formatter(LogFormatter())  # plain "2", "0.5", not 2x10^0
            loss_ax.yaxis.set_minor_formatter(LogFormatter(minor_thresholds=(2, 0.5)))
        style_legend(loss_ax, [("loss", "-", 1.8, GREY), ("TD error", "--", 1.2, GREY)])
    else:
        no_data(loss_ax)
    loss_ax.set(title="learner loss and TD error", ylabel="loss / |TD error|")

    # throughput: experiences/s on the left axis, updates/s on a twin right axis
    exps = line(speed_ax, "epochs", "actor/experiences_per_s", "-", 1.8)
    twin = speed_ax.twinx()
    updates = line(twin, "epochs", "learner/updates_per_s", "--", 1.4)
    if updates:
        twin.set_ylabel("learner updates/s (dashed)")
        twin.yaxis.set_major_formatter(EngFormatter(sep=""))
    else:
        twin.remove()
    if exps or updates:
        entries = [("actor experiences/s (left)", "-", 1.8, GREY), ("learner updates/s (right)", "--", 1.4, GREY)]
        style_legend(twin if updates else speed_ax, entries)  # on top of both axes' lines
    else:
        no_data(speed_ax)
    speed_ax.set(title="throughput", ylabel="actor experiences/s (solid)")
    speed_ax.yaxis.set_major_formatter(EngFormatter(sep=""))


def plot(
    runs: list[Run], out: str, title: str | None = None, baseline_score: float | None = None, baseline_label: str = "random"
) -> Figure:
    """Draw every panel for runs and save the PNG to out; return the figure."""
    # tab10 is a ListedColormap of RGB tuples; the stubs type a Colormap without colors
    palette: Sequence[tuple[float, float, float]] = cast(Any, matplotlib.colormaps["tab10"]).colors
    colours = [palette[i % len(palette)] for i in range(len(runs))]
    with matplotlib.rc_context(FONTS):
        fig = Figure(figsize=(14, 18), dpi=100)
        axes = fig.subplots(5, 2, sharex="col")
        # fixed margins: title, run legend and column headings above, twin y labels on the right
        fig.subplots_adjust(left=0.07, right=0.93, bottom=0.04, top=0.895, hspace=0.3, wspace=0.3)
        for col, xcol in enumerate(X_COLUMNS):
            _column(axes[:, col], functools.partial(draw, runs, colours, xcol), baseline_score, baseline_label)
            box = axes[0, col].get_position()
            fig.text((box.x0 + box.x1) / 2, 0.925, f"against {xcol[1]}", ha="center", va="bottom", fontsize=14, fontweight="bold")
            axes[-1, col].set_xlabel(xcol[1])
            for row_ax in axes[:, col]:
                row_ax.grid(True, alpha=0.3)
        axes[-1, 0].xaxis.set_major_formatter(EngFormatter(sep=""))

        if title:
            fig.suptitle(title, y=0.99, fontweight="bold")
        handles = [Line2D([], [], color=c, linewidth=3) for c in colours]
        names = [run.name for run in runs]
        fig.legend(
            handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.97), ncol=min(len(runs), 5), frameon=False, fontsize=13
        )
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, format="png")
    return fig


@dataclass
class PlotArgs:
    runs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run folders holding metrics.jsonl, or paths to .jsonl files (one or more)."""
    out: str = "curves.png"
    """The PNG to write."""
    names: str | None = None
    """Comma-separated legend names, one per run (default: the folders' names)."""
    title: str | None = None
    """The figure's title."""
    baseline_score: float | None = None
    """Draw a horizontal reference line at this score on the evaluation panel (a random policy's, say)."""
    baseline_label: str = "random"
    """The reference line's label."""


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(PlotArgs, argv, "python -m launch.tools.plot", "Draw learning curves from runs' metrics.jsonl into one PNG.")
        if not args.runs:
            raise UsageError("RUN_DIR: name at least one run folder or metrics .jsonl file")
        names = [name.strip() for name in args.names.split(",")] if args.names is not None else list(map(default_name, args.runs))
        if len(names) != len(args.runs):
            raise UsageError(f"--names gives {len(names)} names for {len(args.runs)} runs")
        runs = [read_run(arg, name) for arg, name in zip(args.runs, names)]
    except UsageError as exc:  # a bad option, a missing run folder or a malformed metrics file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        if run.skipped:
            print(f"warning: {run.name}: skipped {run.skipped} rows without env_steps ({run.path})", file=sys.stderr)
        last = [row["eval/score"] for row in run.evals if is_number(row.get("eval/score"))]
        last_text = f"last eval score {last[-1]:.1f}" if last else "no eval score"
        print(f"{run.name}: {len(run.epochs)} epoch rows, {len(run.evals)} eval rows, {last_text}")
    try:
        plot(runs, args.out, args.title, args.baseline_score, args.baseline_label)
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
