"""shared/evaluation/result.py: eval_final.json round-trips through the result dataclasses, and old files load."""

import dataclasses
import json

import pytest

from shared.evaluation.result import (
    RESULT_VERSION,
    Candidate,
    Drill,
    Drills,
    FinalResult,
    KeptWeights,
    LateWindow,
    Row,
    Summary,
    WeightsRow,
    load_result,
)  # fmt: skip


def _summary(mean: float, successes: int = 1) -> Summary:
    return Summary(4, mean, [mean - 1, mean + 1], mean, successes, successes / 4, [0.0, 0.9], 2.5, 100.0)


def _result() -> FinalResult:
    episodes = [{"score": 700.0, "success": False, "return": 3.0, "length": 90}]
    hazards = {"kind": "clusters", "episodes": 1, "successes": 0, "clusters": []}
    last = WeightsRow(_summary(700.0), hazards, episodes, 11, 0.05, weights_version=7, env_steps=8000, greedy={"score": 1.0})
    late = LateWindow(_summary(650.0), hazards, [], 12, 0.05, 0, 25, [KeptWeights(6, 6400, _summary(600.0), episodes)])
    noop = Row(_summary(800.0, 0), hazards, episodes, 14, 0.0, 30)
    selection = [Candidate(7, 8000, None, _summary(700.0), "last", [700.0, 710.0])]
    return FinalResult(
        "runs/r", 5, 5, 10, 0.05, "mario", "1-1", 8000, 240, 54.0, last, 3.9, dataclasses.replace(last, same_as_last=True),
        late, {"low_epsilon": None, "noop_greedy": noop}, selection, 12.5,
    )  # fmt: skip


def test_eval_final_json_round_trips_through_the_dataclasses(tmp_path):
    path = tmp_path / "eval_final.json"
    path.write_text(_result().to_json())
    back = load_result(str(path))
    assert back == _result()
    assert isinstance(back.late_window.weights[0].summary, Summary) and back.secondary["low_epsilon"] is None
    assert json.loads(path.read_text())["version"] == RESULT_VERSION
    assert back.to_json() == path.read_text()  # byte for byte


def test_an_old_file_under_mario_words_without_a_version_loads(tmp_path):
    old_summary = {"episodes": 2, "x_pos_mean": 650.0, "x_pos_ci": [600.0, 700.0], "x_pos_median": 650.0, "flags": 1}
    old_summary |= {"flag_rate": 0.5, "flag_rate_ci": [0.1, 0.9], "return_mean": 2.0, "length_mean": 80.0}
    last = {"weights_version": 3, "env_steps": 900, "summary": old_summary, "greedy": {"x_pos": 640, "flag": False}}
    old = {"run_dir": "r", "seed": 1, "eval_seed": 1, "stream_seed": 2, "epsilon": 0.05, "env": "mario", "stage": "1-1"}
    old |= {"env_steps": 900, "updates": 40, "samples_per_transition": None, "wall_seconds": 9.0, "last": last}
    old |= {"best": dict(last, same_as_last=True), "secondary": {"noop_greedy": {"noop_max": 30, "summary": old_summary}}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    got = load_result(str(tmp_path / "old.json"))
    assert (
        got.last.summary.score_mean == 650.0
        and got.last.summary.successes == 1
        and got.last.greedy == {"score": 640, "success": False}
    )
    assert got.best is not None and got.best.same_as_last and got.late_window is None and got.selection == []
    assert got.secondary["noop_greedy"].noop_max == 30 and got.secondary["noop_greedy"].summary.success_rate == 0.5
    assert got.version == RESULT_VERSION and got.drills is None


def _drills() -> Drills:
    goomba = Drill("goomba", 250.0, 400.0, 198.0, 26, 12, 20, 19, 0.95, [0.76, 0.99], 16, 0.8, [0.58, 0.92], 1200)
    pipes = Drill("pipes", 400.0, 900.0, 319.0, 48, 12, 20, 5, 0.25, [0.11, 0.47], 3, 0.15, [0.05, 0.36], 3400)
    reference = {"try": 2, "success": True, "score": 3161.0, "length": 492}
    return Drills(0.05, 20, 12, 77, [goomba, pipes], 0.95 * 0.25, reference, 41.5)


def test_a_result_with_drills_round_trips_and_a_version_2_file_without_them_loads(tmp_path):
    path = tmp_path / "eval_final.json"
    path.write_text(dataclasses.replace(_result(), drills=_drills()).to_json())
    back = load_result(str(path))
    assert back.drills == _drills() and isinstance(back.drills.points[1], Drill) and back.drills.points[1].forced_passes == 3
    assert back.to_json() == path.read_text() and json.loads(path.read_text())["version"] == RESULT_VERSION == 2
    before = _result().to_dict()  # as this release wrote it before the drills: no key
    del before["drills"]
    (tmp_path / "v2.json").write_text(json.dumps(before))
    assert load_result(str(tmp_path / "v2.json")) == _result()


def test_a_file_that_is_not_a_result_is_refused_by_name(tmp_path):
    data = _result().to_dict()
    del data["last"]["summary"]["score_mean"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"last\.summary.*score_mean"):
        load_result(str(tmp_path / "bad.json"))
    (tmp_path / "new.json").write_text(json.dumps(_result().to_dict() | {"version": RESULT_VERSION + 1}))
    with pytest.raises(ValueError, match="newer than this release"):
        load_result(str(tmp_path / "new.json"))
