"""launch.tools.plot: learning curves from synthetic metrics.jsonl files (no training, a few seconds)."""

import json
import math
import os
import subprocess
import sys

import matplotlib.image
import pytest

from launch.tools import plot
from tests.support.paths import ROOT as REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def epoch_row(i: int, env_steps: int | None = 1000) -> dict:
    row = {
        "step": 20 * i,
        "wall_seconds": 30.0 * i,
        "learner/loss": 5.0 * math.exp(-i / 10) + 0.2,
        "learner/td_error": 6.0 * math.exp(-i / 10) + 0.3,
        "learner/q_mean": 20.0 + i,
        "learner/updates_per_s": 4.0 + 0.3 * math.sin(i / 3),
        "learner/samples_per_s": 280.0,
        "actor/experiences_per_s": 190.0 + 10 * math.cos(i / 4),
        "actor/return": 250.0 + 15.0 * i,
        "actor/score": 300.0 + 20.0 * i,
        "actor/success_rate": 0.0,
    }
    if env_steps is not None:
        row["env_steps"] = env_steps * i
    return row


def eval_row(i: int, env_steps: int = 1000) -> dict:
    return {
        "step": 20 * i,
        "env_steps": env_steps * i,
        "wall_seconds": 30.0 * i + 5.0,
        "eval/score": 400.0 + 60.0 * i,
        "eval/score_median": 380.0 + 55.0 * i,
        "eval/success_rate": min(1.0, 0.05 * i),
        "eval/return": 500.0 + 40.0 * i,
        "eval/length": 800,
        "eval/episodes": 10,
        "eval/epsilon": 0.0,
    }


def write_rows(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def make_runs(root):
    """run_a: 12 epoch rows and 4 eval rows (last score 400 + 60*12 = 1120);
    run_b: 10 kept epoch rows, 3 rows without env_steps, no eval rows."""
    rows_a = []
    for i in range(1, 13):
        rows_a.append(epoch_row(i, 1000))
        if i % 3 == 0:
            rows_a.append(eval_row(i, 1000))
    rows_b = [epoch_row(i, None) for i in range(1, 4)] + [epoch_row(i, 1500) for i in range(4, 14)]
    write_rows(root / "run_a" / "metrics.jsonl", rows_a)
    write_rows(root / "run_b" / "metrics.jsonl", rows_b)
    return root / "run_a", root / "run_b"


def read_png(path):
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(str(path))
    height, width = image.shape[:2]
    assert height > width > 0
    return image


def test_two_runs(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    out = tmp_path / "curves.png"
    rc = plot.main([str(run_a), str(run_b), "--out", str(out), "--title", "synthetic", "--baseline-score", "320"])
    captured = capsys.readouterr()
    assert rc == 0
    image = read_png(out)
    assert image.shape[:2] == (1800, 1400)  # 14 x 18 inches at dpi 100
    assert str(out) in captured.out
    assert "run_a: 12 epoch rows, 4 eval rows, last eval score 1120.0" in captured.out
    assert "run_b: 10 epoch rows, 0 eval rows, no eval score" in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1
    assert "run_b" in warnings[0] and "skipped 3 rows without env_steps" in warnings[0]


def test_names_and_jsonl_path(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    out = tmp_path / "sub" / "named.png"
    rc = plot.main([str(run_a / "metrics.jsonl"), str(run_b), "--names", "apex,seed", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0
    read_png(out)
    assert "apex: 12 epoch rows, 4 eval rows" in captured.out
    assert "seed: 10 epoch rows, 0 eval rows" in captured.out


def test_wrong_number_of_names(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    rc = plot.main([str(run_a), str(run_b), "--names", "only_one", "--out", str(tmp_path / "x.png")])
    assert rc == 2
    assert "--names" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_run_without_eval_rows_plots_no_data(tmp_path, capsys):
    _, run_b = make_runs(tmp_path)
    out = tmp_path / "no_eval.png"
    assert plot.main([str(run_b), "--out", str(out)]) == 0
    read_png(out)
    assert "run_b: 10 epoch rows, 0 eval rows, no eval score" in capsys.readouterr().out


def no_data_panels(fig) -> int:
    return sum(any(text.get_text() == "no data" for text in ax.texts) for ax in fig.axes)


def test_no_data_panels(tmp_path):
    run_a, run_b = make_runs(tmp_path)
    fig = plot.plot([plot.read_run(str(run_b), "b")], str(tmp_path / "b.png"))
    assert no_data_panels(fig) == 4  # eval score and success rate, both columns
    fig = plot.plot([plot.read_run(str(run_a), "a"), plot.read_run(str(run_b), "b")], str(tmp_path / "ab.png"))
    assert no_data_panels(fig) == 0


def test_run_with_only_eval_rows(tmp_path):
    write_rows(tmp_path / "evals" / "metrics.jsonl", [eval_row(i) for i in range(1, 3)])
    out = tmp_path / "evals.png"
    assert plot.main([str(tmp_path / "evals"), "--out", str(out)]) == 0
    read_png(out)


def test_missing_run_folder(tmp_path, capsys):
    missing = tmp_path / "no_such_run"
    rc = plot.main([str(missing), "--out", str(tmp_path / "x.png")])
    captured = capsys.readouterr()
    assert rc == 2
    assert str(missing) in captured.err
    assert "Traceback" not in captured.err


def test_folder_without_metrics(tmp_path, capsys):
    empty = tmp_path / "empty_run"
    empty.mkdir()
    rc = plot.main([str(empty), "--out", str(tmp_path / "x.png")])
    assert rc == 2
    assert str(empty) in capsys.readouterr().err


def test_malformed_line_names_line_number(tmp_path, capsys):
    run_a, _ = make_runs(tmp_path)
    path = run_a / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(4, '{"step": 100, "env_steps": ')  # becomes line 5
    path.write_text("\n".join(lines) + "\n")
    rc = plot.main([str(run_a), "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(path) in err and "line 5" in err


def test_a_last_line_cut_short_by_a_stopped_run_is_left_out_with_a_note(tmp_path, capsys):
    run_a, _ = make_runs(tmp_path)
    path = run_a / "metrics.jsonl"
    whole = path.read_text()
    path.write_text(whole + '{"step": 100, "env_st')  # no newline: the write the run did not finish
    rc = plot.main([str(run_a), "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert rc == 0 and (tmp_path / "x.png").exists()
    assert "cut short" in err and f"line {whole.count(chr(10)) + 1}" in err


@pytest.mark.timeout(60)
def test_module_as_subprocess(tmp_path):
    run_a, run_b = make_runs(tmp_path)
    out = tmp_path / "cli.png"
    result = subprocess.run(
        [sys.executable, "-m", "launch.tools.plot", str(run_a), str(run_b), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    read_png(out)
