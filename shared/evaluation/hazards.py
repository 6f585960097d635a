"""Where evaluation episodes end: per-hazard pass rates, or a histogram of end scores.

A cluster (``EnvEntry.hazards``) is reached by episodes with score >= lo or a success, and ends those without success
with lo <= score < hi; its pass rate is ``(reached - ended) / reached``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.config import EnvConfig

__all__ = ["HISTOGRAM_BINS", "clusters_for", "format_hazards", "hazard_table"]

HISTOGRAM_BINS = 10


def clusters_for(env_cfg: EnvConfig) -> list[tuple[str, float, float]]:
    """The hazard clusters of the level ``env_cfg`` plays (its entry's ``hazards``); empty: none."""
    from shared.envs import entry_for

    return entry_for(env_cfg).hazards_of(env_cfg)


def hazard_table(
    records: Sequence[dict],
    clusters: Sequence[tuple[str, float, float]] | None,
    success_key: str = "success",
    score_key: str = "score",
) -> dict:
    """Where the episodes ``records`` end: each cluster's ``reached``, ``ended`` and ``pass_rate`` (None: none reached it),
    or without clusters a ``HISTOGRAM_BINS``-bin histogram of the unsuccessful episodes' end scores (empty if none)."""
    scores = [float(r[score_key]) for r in records]
    won = [bool(r[success_key]) for r in records]
    head = {"episodes": len(scores), "successes": int(sum(won))}
    if clusters:
        rows = []
        for name, lo, hi in clusters:
            reached = sum(1 for x, w in zip(scores, won) if w or x >= lo)
            ended = sum(1 for x, w in zip(scores, won) if not w and lo <= x < hi)
            rate = (reached - ended) / reached if reached else None
            rows.append({"name": name, "x": [float(lo), float(hi)], "reached": reached, "ended": ended, "pass_rate": rate})
        return {"kind": "clusters", **head, "clusters": rows}
    lost = [x for x, w in zip(scores, won) if not w]
    if not lost:
        return {"kind": "histogram", **head, "edges": [], "counts": []}
    counts, edges = np.histogram(np.asarray(lost, dtype=np.float64), bins=HISTOGRAM_BINS)
    return {"kind": "histogram", **head, "edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def format_hazards(table: dict) -> str:
    """The table in one line: ``name pass_rate (passed/reached)`` per cluster, or ``[lo, hi): count`` per bin that holds any."""
    if table["kind"] == "clusters":
        return ", ".join(
            f"{c['name']} {'-' if c['pass_rate'] is None else format(c['pass_rate'], '.0%')} "
            f"({c['reached'] - c['ended']}/{c['reached']})"
            for c in table["clusters"]
        )
    if not table["counts"]:
        return "no episode ended without success"
    edges, last = table["edges"], len(table["counts"]) - 1
    bins = ", ".join(
        f"[{edges[i]:,.4g}, {edges[i + 1]:,.4g}{']' if i == last else ')'}: {n}" for i, n in enumerate(table["counts"]) if n
    )
    return f"ends without success by score: {bins}"
