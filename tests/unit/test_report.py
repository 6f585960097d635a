"""launch.tools.report on synthetic run folders whose answer is known: grouping, means, IQM, intervals, baselines."""

import json

import numpy as np
import pytest

from launch.tools.report import main, report
from shared.config import RunConfig
from shared.envs import resolve

SCORE_KEYS = ("score", "success", "score_mean", "success_rate")


def fake_run(folder, name, lr, seed, x_means, flags=0, label="", env_steps=200_000, wall=2_000.0, old_names=False):
    """A run folder with config.json, machine.json and an eval_final.json whose last weights scored episodes
    averaging ``x_means`` (a list: one value per episode), the first ``flags`` of them successes; ``old_names``:
    written under Mario's words, as runs were before the names were generic."""
    path = folder / name
    path.mkdir()
    cfg = RunConfig(label=label, seed=seed)
    cfg.learner.lr = lr
    (path / "config.json").write_text(resolve(cfg).to_json())
    (path / "machine.json").write_text(json.dumps({"cpu": "AMD EPYC", "cores": 2}))
    score, success, mean, rate = ("x_pos", "flag", "x_pos_mean", "flag_rate") if old_names else SCORE_KEYS
    episodes = [{score: x, success: i < flags, "return": 1.0, "length": 100} for i, x in enumerate(x_means)]
    summary = {"episodes": len(episodes), mean: float(np.mean(x_means)), rate: flags / len(episodes)}
    (path / "eval_final.json").write_text(
        json.dumps(
            {
                "env_steps": env_steps,
                "wall_seconds": wall,
                "last": {"summary": summary, "episodes": episodes},
                "best": {"summary": summary, "episodes": episodes},
            }
        )
    )
    return str(path)


def test_runs_are_grouped_by_the_config_value_they_differ_in_with_known_statistics(tmp_path):
    for seed, x in enumerate([1000, 2000, 3000, 10_000]):
        fake_run(tmp_path, f"a{seed}", 1e-4, seed, [x] * 4, flags=1)
    fake_run(tmp_path, "b0", 2.5e-4, 7, [500, 700])
    groups, baselines, warnings = report([str(tmp_path)], [])
    assert warnings == [] and baselines == []
    by = {g["group"]: g for g in groups}
    assert set(by) == {"learner.lr=0.0001", "learner.lr=0.00025"}  # seeds differ too, but never make a group
    a, b = by["learner.lr=0.0001"], by["learner.lr=0.00025"]
    assert (a["runs"], a["evaluated"], a["env_steps"], a["cpus"]) == (4, 4, [200_000], ["AMD EPYC"])
    assert a["score_mean"] == 4000.0 and a["score_iqm"] == 2500.0  # IQM drops the 1,000 and the 10,000
    assert a["success_rate_mean"] == 0.25 and a["per_run"][0]["env_steps_per_s"] == 100.0
    low, high = a["score_mean_ci"]
    assert 1000 <= low < 4000 < high <= 10_000
    assert b["score_mean"] == 600.0 and b["score_mean_ci"] is None  # one run: no interval


def test_labels_group_runs_and_runs_without_a_final_evaluation_are_named_and_left_out(tmp_path):
    fake_run(tmp_path, "x", 1e-4, 1, [100], label="short")
    fake_run(tmp_path, "y", 2.5e-4, 2, [300], label="short")
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "config.json").write_text(resolve(RunConfig(label="short", seed=3)).to_json())
    groups, _, warnings = report([str(tmp_path)], [])
    (g,) = groups
    assert (g["group"], g["runs"], g["evaluated"], g["score_mean"]) == ("short", 3, 2, 200.0)
    assert len(warnings) == 1 and str(tmp_path / "z") in warnings[0]


def test_baseline_rows_come_from_launch_evaluate_files_and_the_report_is_written(tmp_path, capsys):
    run = fake_run(tmp_path, "r", 1e-4, 1, [2000, 2200], flags=1)
    base = tmp_path / "right-A.json"
    base.write_text(
        json.dumps(
            {
                "policy": "constant",
                "action": "right+A",
                "epsilon": 0.05,
                "stage": "1-1",
                "episodes": [{"score": x, "success": x > 3000, "return": 0.0, "length": 1} for x in (1000, 1500, 3200, 1700)],
            }
        )
    )
    assert main([run, "--baseline", str(base), "--out", str(tmp_path / "out" / "t")]) == 0
    table = capsys.readouterr().out
    assert "| baseline: constant right+A, epsilon 0.05, stage 1-1 (right-A.json) | 4 episodes |" in table and "1,850" in table
    written = json.loads((tmp_path / "out" / "t.json").read_text())
    assert written["baselines"][0]["score_mean"] == 1850.0 and written["baselines"][0]["success_rate_mean"] == 0.25
    assert (tmp_path / "out" / "t.md").read_text().strip() == table.strip()


@pytest.mark.parametrize("bad", ["folder", "baseline"])
def test_bad_input_is_named(tmp_path, capsys, bad):
    run = fake_run(tmp_path, "r", 1e-4, 1, [1])
    (tmp_path / "empty").mkdir()
    args = [str(tmp_path / "empty")] if bad == "folder" else [run, "--baseline", str(tmp_path / "none.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert (
        (f"{str(tmp_path / 'empty')!r} is not a run folder" in err)
        if bad == "folder"
        else (f"--baseline={str(tmp_path / 'none.json')!r}" in err)
    )


def test_curves_of_a_group_are_drawn_from_the_runs_evaluations(tmp_path):
    for seed in range(2):
        run = fake_run(tmp_path, f"r{seed}", 1e-4, seed, [1000])
        rows = [
            {"step": 1, "env_steps": s, "wall_seconds": 1.0, "eval/score": 500.0 + s / 100 + seed}
            for s in (30_000, 10_000, 20_000)
        ] + [{"step": 1, "env_steps": 5, "wall_seconds": 1.0, "learner/loss": 1}]
        (tmp_path / f"r{seed}" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    from launch.tools.report import eval_curve

    steps, xs = eval_curve(run)
    assert steps.tolist() == [10_000, 20_000, 30_000] and xs.tolist() == [601.0, 701.0, 801.0]
    assert main([str(tmp_path), "--plot", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cpu_column_says_bf16_and_the_replay_ratio_comes_from_the_run(tmp_path):
    """Two EPYC kinds differ 2x in learner speed only by native bf16; the samples trained per transition come from
    eval_final.json, or for older runs from the last learner/replay_ratio of metrics.jsonl."""
    new = fake_run(tmp_path, "new", 1e-4, 1, [100], label="g")
    old = fake_run(tmp_path, "old", 1e-4, 2, [300], label="g")
    (tmp_path / "new" / "machine.json").write_text(json.dumps({"cpu": "AMD EPYC", "native_bf16": True}))
    (tmp_path / "old" / "machine.json").write_text(json.dumps({"cpu": "AMD EPYC", "native_bf16": False}))
    final = json.loads((tmp_path / "new" / "eval_final.json").read_text())
    (tmp_path / "new" / "eval_final.json").write_text(json.dumps({**final, "samples_per_transition": 7.83}))
    rows = [
        {"env_steps": 10, "learner/replay_ratio": 3.5},
        {"env_steps": 15, "eval/score": 1.0},
        {"env_steps": 20, "learner/replay_ratio": 4.15},
    ]
    (tmp_path / "old" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (g,) = report([new, old], [])[0]
    assert g["cpus"] == ["AMD EPYC, bf16", "AMD EPYC, no bf16"]
    (tmp_path / "new" / "machine.json").write_text(json.dumps({"cpu": "Xeon", "native_bf16": True, "gpu": "H100"}))
    assert report([new], [])[0][0]["cpus"] == ["Xeon, bf16, GPU H100"]
    assert [p["samples_per_transition"] for p in g["per_run"]] == [7.83, 4.15]


def test_the_per_run_table_says_where_most_missed_episodes_end(tmp_path, capsys):
    """The densest --end-window of the unsuccessful episodes' ends, counted; successes never count as ends."""
    ends = [650, 700, 660, 1100, 1500, 1190, 3000, 3100]  # the last two succeed (fake_run: successes come first)
    run = fake_run(tmp_path, "r", 1e-4, 5, ends[-2:] + ends[:-2], flags=2, label="hazard")
    (g,) = report([run], [])[0]
    assert g["per_run"][0]["last"]["ends"] == {"lo": 650.0, "hi": 700.0, "count": 3, "episodes": 8}
    (g,) = report([run], [], window=100)[0]  # 650-700 still fits in 100; a window of 10 holds one end each
    assert g["per_run"][0]["last"]["ends"]["count"] == 3
    assert report([run], [], window=10)[0][0]["per_run"][0]["last"]["ends"] == {
        "lo": 650.0,
        "hi": 650.0,
        "count": 1,
        "episodes": 8,
    }  # ties: the leftmost window
    assert main([run, "--end-window", "500"]) == 0
    out = capsys.readouterr().out
    assert "| hazard | r (5) | 1,488, 2/8 successes | 4 of 8 at 650-1,100 |" in out  # [650, 1,150): four ends
    flawless = fake_run(tmp_path, "f", 1e-4, 6, [3200, 3300], flags=2, label="flawless")
    assert report([flawless], [])[0][0]["per_run"][0]["last"]["ends"] is None
    assert main([flawless]) == 0 and "| every episode succeeded |" in capsys.readouterr().out
    assert main([run, "--end-window", "0"]) == 2
    assert "--end-window=0 must be a positive width" in capsys.readouterr().err


def test_runs_and_baselines_written_under_marios_words_report_as_they_did(tmp_path):
    """Runs and launch.evaluate files from before the names were generic (x_pos, flag, eval/x_pos) are read through
    shared.results.upgrade: the same figures as the same runs written today."""
    for old in (False, True):
        label = "old" if old else "new"
        for seed, xs in enumerate([[1000, 3100], [2000, 2400]]):
            fake_run(tmp_path, f"{label}{seed}", 1e-4, seed, xs, flags=1, label=label, old_names=old)
            key = "eval/x_pos" if old else "eval/score"
            rows = [{"step": 1, "env_steps": s, "wall_seconds": 1.0, key: s / 10} for s in (100, 200)]
            (tmp_path / f"{label}{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        score, success = ("x_pos", "flag") if old else ("score", "success")
        episodes = [{score: x, success: x > 3000, "return": 0.0, "length": 1} for x in (1000, 3200)]
        (tmp_path / f"{label}.json").write_text(json.dumps({"policy": "random", "epsilon": 1.0, "episodes": episodes}))
    groups, baselines, _ = report([str(tmp_path)], [str(tmp_path / "new.json"), str(tmp_path / "old.json")])
    by = {g["group"]: g for g in groups}
    figures = ("score_mean", "score_mean_ci", "score_iqm", "success_rate_mean", "best_score_mean")
    assert [by["old"][k] for k in figures] == [by["new"][k] for k in figures]
    assert by["old"]["score_mean"] == 2125.0 and by["old"]["success_rate_mean"] == 0.5
    ends = {"lo": 3100.0, "hi": 3100.0, "count": 1, "episodes": 2}  # fake_run: the first episode succeeded
    assert by["old"]["per_run"][0]["last"]["ends"] == by["new"]["per_run"][0]["last"]["ends"] == ends
    assert [b["score_mean"] for b in baselines] == [2100.0, 2100.0]
    assert [b["success_rate_mean"] for b in baselines] == [0.5, 0.5]
    from launch.tools.report import eval_curve

    assert eval_curve(str(tmp_path / "old0"))[1].tolist() == eval_curve(str(tmp_path / "new0"))[1].tolist() == [10.0, 20.0]
