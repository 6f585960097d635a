"""The README's pictures (launch.tools.pictures): the curve's points, and a missing run folder keeping what is there."""

import json

import numpy as np

from launch.tools import pictures
from shared.evaluation.result import FinalResult, Summary, WeightsRow


def _run(folder, scores: list[float], final: float) -> str:
    folder.mkdir()
    rows = [{"step": i, "env_steps": 1000 * (i + 1), "wall_seconds": i, "eval/score": s} for i, s in enumerate(scores)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps = 1000 * (len(scores) + 1)
    last = WeightsRow(Summary(50, final, [final, final], final, 0, 0.0, [0.0, 0.1], 1.0, 9.0), env_steps=steps)
    result = FinalResult(str(folder), 1, 1, 2, 0.05, "mario", "1-1", steps, 10, 60.0, last)
    (folder / "eval_final.json").write_text(result.to_json())
    return str(folder)


def test_score_points_end_at_the_final_row(tmp_path):
    steps, scores = pictures.score_points(_run(tmp_path / "a", [300.0, 700.0], 900.0))
    assert steps.tolist() == [1000.0, 2000.0, 3000.0]
    assert scores.tolist() == [300.0, 700.0, 900.0]


def test_curve_is_written(tmp_path):
    runs = [_run(tmp_path / "a", [300.0, 700.0], 900.0), _run(tmp_path / "b", [500.0, 500.0], 500.0)]
    out = tmp_path / "curve.png"
    baselines = {"right+A": "docs/lab/experiments/right-A-1-1-rows.json"}
    pictures.draw_curve(runs, "defaults", baselines, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.allclose(np.interp([1500.0], *pictures.score_points(runs[0])), [500.0])


def test_missing_runs_keep_the_committed_pictures(tmp_path, capsys):
    assert pictures.main(["--runs-root", str(tmp_path)]) == 0
    assert "kept the committed ones; not here:" in capsys.readouterr().out
