"""The names evaluation results use, and the step that reads files written under the old ones.

Every env's episode has a *score* and a *success*; runs written before the names were generic used Mario's words
(``x_pos_mean``, ``flag_rate``, ``actor/distance``), which :func:`upgrade` renames so old runs still report and rank.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["read_metrics", "upgrade"]

_EXACT = {
    "x_pos": "score",
    "flag": "success",
    "flags": "successes",
    "flag_rate": "success_rate",
    "flag_rate_ci": "success_rate_ci",
    "actor/distance": "actor/score",
    "actor/flag_rate": "actor/success_rate",
    "actor/flags": "actor/successes",
    "eval/flag_rate": "eval/success_rate",
}
_PATTERNS = [
    (re.compile(r"^(eval/|best_|final/\w+?_)?x_pos(_mean|_median|_max|_min|_ci)?$"), "score"),
    (re.compile(r"^(final/\w+?_|best_)flag_rate(_mean)?$"), "success_rate"),
]


def _renamed(key: str) -> str:
    if key in _EXACT:
        return _EXACT[key]
    for pattern, word in _PATTERNS:
        m = pattern.match(key)
        if m:
            head, tail = m.group(1) or "", m.group(2) or ""
            return f"{head}{word}{tail}"
    return key


def upgrade(obj: Any) -> Any:
    """``obj`` (a result file's JSON, a metrics row, a checkpoint's ``eval``) with every old key renamed, at any
    depth; keys already generic are kept, and where a dict holds both an old and a new key the new one wins."""
    if isinstance(obj, list):
        return [upgrade(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict = {}
    for key, value in obj.items():
        new = _renamed(key) if isinstance(key, str) else key
        if new != key and new in obj:  # summaries wrote some figures under both names
            continue
        out[new] = upgrade(value)
    return out


def read_metrics(path: str) -> tuple[list[dict], str]:
    """The rows of a ``metrics.jsonl`` (each through :func:`upgrade`) and a note naming a cut-short last line, left out
    ('' when none); any other line that is not a JSON object is a ValueError naming its number."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    lines = text.split("\n")  # a complete file ends with a newline: its last piece is empty
    rows, note = [], ""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # no newline after it: a write that did not finish
                note = f"{path}: line {number} is cut short (the run stopped while writing it); left out"
                break
            raise ValueError(f"{path}: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number}: not a JSON object")
        rows.append(upgrade(row))
    return rows, note
