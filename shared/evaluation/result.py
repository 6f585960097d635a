"""The final evaluation's result as dataclasses: one per row and one for the whole, which ``eval_final.json`` holds.

``FinalResult.to_json`` writes the file with its ``version``; :func:`load_result` reads any version back (files from
before the version, and before the generic names, through :func:`shared.evaluation.names.upgrade`).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from shared.evaluation.names import upgrade

RESULT_NAME = "eval_final.json"
RESULT_VERSION = 2  # 1: the files written before the version key (loaded as they are)


@dataclass
class Summary:
    """Episodes in figures: mean score with a 95% bootstrap interval, success rate with a Wilson interval."""

    episodes: int
    score_mean: float
    score_ci: list[float]
    score_median: float
    successes: int
    success_rate: float
    success_rate_ci: list[float]
    return_mean: float
    length_mean: float


@dataclass
class Row:
    """Episodes of one row of the protocol: their summary, where they ended (shared/evaluation/hazards.py), each one."""

    summary: Summary
    hazards: dict = field(default_factory=dict)
    episodes: list[dict] = field(default_factory=list)  # {score, success, return, length[, noops]} each
    stream_seed: int | None = None
    epsilon: float | None = None
    noop_max: int = 0  # > 0: each episode starts with 0-noop_max no-op steps


@dataclass
class WeightsRow(Row):
    """The last weights' or best.pt's row, with the weights' version and one greedy episode."""

    weights_version: int = 0
    env_steps: int = 0
    greedy: dict | None = None
    same_as_last: bool = False  # best.pt is the last weights: the same episodes


@dataclass
class KeptWeights:
    """One kept set of weights of the late window."""

    weights_version: int
    env_steps: int
    summary: Summary
    episodes: list[dict] = field(default_factory=list)


@dataclass
class LateWindow(Row):
    """The last kept weights, each on the same episodes, pooled."""

    episodes_per_weights: int = 0
    weights: list[KeptWeights] = field(default_factory=list)


@dataclass
class Candidate:
    """One candidate for best.pt in the selection: its in-training figures and its fresh episodes' scores."""

    weights_version: int
    env_steps: int
    in_training: dict | None
    fresh: Summary
    weights: str = "snapshot"  # or "last"
    score: list[float] = field(default_factory=list)  # each fresh episode's (files before the t-test lack them)


@dataclass
class Drill:
    """One drill point (shared/evaluation/drills.py): trials from the reference's state ``lead`` steps before ``lo``,
    passed when the score reaches ``hi`` or the episode succeeds; plain, and with one forced random press."""

    name: str
    lo: float
    hi: float
    x: float  # the reference's score at the state (0 at the true start)
    t: int  # the state's agent step in the reference
    lead: int  # steps the reference took from the state to ``lo`` (``Drills.lead``, fewer near the start)
    trials: int  # per variant
    passes: int
    pass_rate: float
    pass_rate_ci: list[float]  # 95% Wilson
    forced_passes: int
    forced_pass_rate: float
    forced_pass_rate_ci: list[float]
    steps: int = 0  # agent steps played in this point's trials, both variants


@dataclass
class Drills:
    """The drill row: each point's pass rates at ``epsilon``, ``trials`` per variant, from ``seed``; the product of the
    plain pass rates predicts the success rate (None: the reference missed the success, so the points do not span it, or
    there is no point)."""

    epsilon: float
    trials: int
    lead: int
    seed: int
    points: list[Drill]
    predicted_success_rate: float | None
    reference: dict = field(default_factory=dict)  # {try, success, score, length}: the scripted episode the points lie on
    seconds: float = 0.0


@dataclass
class FinalResult:
    """What ``eval_final.json`` holds: the run, the selection of best.pt, and every row of the final evaluation."""

    run_dir: str
    seed: int
    eval_seed: int
    stream_seed: int
    epsilon: float
    env: str
    stage: str
    env_steps: int
    updates: int
    wall_seconds: float
    last: WeightsRow
    samples_per_transition: float | None = None  # files before the replay ratio was held lack it
    best: WeightsRow | None = None
    late_window: LateWindow | None = None
    secondary: dict[str, Row | None] = field(default_factory=lambda: {"low_epsilon": None, "noop_greedy": None})
    selection: list[Candidate] = field(default_factory=list)
    seconds: float = 0.0
    version: int = RESULT_VERSION
    drills: Drills | None = None  # eval.drill_trials > 0: the last weights' drills (files before them lack it)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def build(kind: Any, value: Any, where: str = "") -> Any:
    """``value`` (parsed JSON) as the type ``kind``: dataclasses field by field, lists and dicts item by item; keys
    that are no field are left out; a missing field without a default is a ValueError naming it."""
    if value is None:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return build(next(a for a in args if a is not type(None)), value, where)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        hints = typing.get_type_hints(kind)
        if not isinstance(value, dict):
            raise ValueError(f"{where or kind.__name__}: {type(value).__name__} where a {kind.__name__} belongs")
        given = {
            f.name: build(hints[f.name], value[f.name], f"{where}.{f.name}") for f in dataclasses.fields(kind) if f.name in value
        }
        try:
            return kind(**given)
        except TypeError as exc:
            raise ValueError(f"{where or kind.__name__}: {exc}") from None
    if origin is list:
        return [build(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and args:
        return {k: build(args[1], v, f"{where}.{k}") for k, v in value.items()}
    return value


def load_result(path: str) -> FinalResult:
    """An ``eval_final.json`` of any version as a :class:`FinalResult`; ValueError naming the file and what is wrong."""
    with open(path, encoding="utf-8") as fh:
        data = upgrade(json.load(fh))
    if data.get("version", 1) > RESULT_VERSION:
        raise ValueError(f"{path}: version {data['version']} is newer than this release reads ({RESULT_VERSION})")
    data["version"] = RESULT_VERSION
    try:
        return build(FinalResult, data, path)
    except ValueError as exc:
        raise ValueError(f"not a final evaluation result: {exc}") from None
