"""launch.tools.report on synthetic run folders whose answer is known: grouping, means, t intervals over runs,
baselines, the further evaluation rows, the minimum detectable effect and the paired mode."""

import json

import numpy as np
import pytest

from launch.tools.report import main, report
from shared.config import RunConfig
from shared.resolution import resolve_config

SCORE_KEYS = ("score", "success", "score_mean", "success_rate")


def fake_run(
    folder, name, lr, seed, x_means, flags=0, label="", env_steps=200_000, wall=2_000.0, old_names=False, final=None, last=None
):
    """A run folder with config.json, machine.json and an eval_final.json whose last weights scored episodes
    averaging ``x_means`` (a list: one value per episode), the first ``flags`` of them successes; ``old_names``:
    written under Mario's words, as runs were before the names were generic; ``final`` and ``last``: further keys of
    eval_final.json and of its ``last`` entry (the late window, secondary rows, hazards)."""
    path = folder / name
    path.mkdir()
    cfg = RunConfig(label=label, seed=seed)
    cfg.learner.lr = lr
    (path / "config.json").write_text(resolve_config(cfg).to_json())
    (path / "machine.json").write_text(json.dumps({"cpu": "AMD EPYC", "cores": 2}))
    score, success = ("x_pos", "flag") if old_names else SCORE_KEYS[:2]
    episodes = [{score: x, success: i < flags, "return": 1.0, "length": 100} for i, x in enumerate(x_means)]
    written = summary(float(np.mean(x_means)), flags / len(episodes), len(episodes))
    if old_names:  # Mario's words, as eval_final.json had them before the names were generic
        written = {
            {"score_mean": "x_pos_mean", "score_ci": "x_pos_ci", "success_rate": "flag_rate"}.get(k, k): v
            for k, v in written.items()
        }
    head = {"run_dir": str(path), "seed": seed, "eval_seed": seed, "stream_seed": 1, "epsilon": 0.05, "env": "mario"}
    head |= {"stage": "1-1", "updates": 100, "samples_per_transition": None}
    (path / "eval_final.json").write_text(
        json.dumps(
            {
                **head,
                "env_steps": env_steps,
                "wall_seconds": wall,
                "last": {"summary": written, "episodes": episodes, **(last or {})},
                "best": {"summary": written, "episodes": episodes},
                **(final or {}),
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
    assert a["score_mean"] == 4000.0 and "score_iqm" not in a  # no IQM: over 4 runs the mean of the middle two
    assert a["success_rate_mean"] == 0.25 and a["per_run"][0]["env_steps_per_s"] == 100.0
    # t over 4 runs: SD sqrt((3,000^2 + 2,000^2 + 1,000^2 + 6,000^2) / 3) = 4,082.483, SE 2,041.241,
    # half-width t_{0.975,3} x SE = 3.182446 x 2,041.241 = 6,496.14 (a percentile bootstrap gave about [1,000, 7,750])
    assert a["score_mean_ci"] == pytest.approx([4000 - 6496.14, 4000 + 6496.14], abs=0.05)
    assert a["success_rate_ci"] == [0.25, 0.25] and a["interval"] == "95% t over 4 runs"
    # one run: its own interval over episodes (this file's summary: 600 +- 100), labelled so
    assert b["score_mean"] == 600.0 and b["score_mean_ci"] == [500.0, 700.0] and b["interval"] == "95% over 2 episodes (one run)"


def test_labels_group_runs_and_runs_without_a_final_evaluation_are_named_and_left_out(tmp_path):
    fake_run(tmp_path, "x", 1e-4, 1, [100], label="short")
    fake_run(tmp_path, "y", 2.5e-4, 2, [300], label="short")
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "config.json").write_text(resolve_config(RunConfig(label="short", seed=3)).to_json())
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
    assert "| hazard | r (5) | 1,488 [1,388, 1,588], 2/8 successes | 4 of 8 at 650-1,100 |" in out  # [650, 1,150): four ends
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
    figures = ("score_mean", "score_mean_ci", "success_rate_mean", "best_score_mean")
    assert [by["old"][k] for k in figures] == [by["new"][k] for k in figures]
    assert by["old"]["score_mean"] == 2125.0 and by["old"]["success_rate_mean"] == 0.5
    ends = {"lo": 3100.0, "hi": 3100.0, "count": 1, "episodes": 2}  # fake_run: the first episode succeeded
    assert by["old"]["per_run"][0]["last"]["ends"] == by["new"]["per_run"][0]["last"]["ends"] == ends
    assert [b["score_mean"] for b in baselines] == [2100.0, 2100.0]
    assert [b["success_rate_mean"] for b in baselines] == [0.5, 0.5]
    from launch.tools.report import eval_curve

    assert eval_curve(str(tmp_path / "old0"))[1].tolist() == eval_curve(str(tmp_path / "new0"))[1].tolist() == [10.0, 20.0]


def summary(score, rate, episodes=50, score_ci=None):
    """A summary in launch/final_eval.py describe's layout."""
    return {
        "episodes": episodes,
        "score_mean": score,
        "score_ci": score_ci or [score - 100, score + 100],
        "score_median": score,
        "successes": round(rate * episodes),
        "success_rate": rate,
        "success_rate_ci": [max(rate - 0.1, 0.0), min(rate + 0.1, 1.0)],
        "return_mean": 0.0,
        "length_mean": 100.0,
    }


def hazards(goomba, pipes):
    """A ``hazards`` entry of the clusters kind: two named hazards and their pass rates (None: never reached)."""
    named = [("goomba", [600, 720], goomba), ("pipes", [1100, 1300], pipes)]
    return {
        "kind": "clusters",
        "episodes": 50,
        "successes": 5,
        "clusters": [{"name": n, "x": x, "reached": 40, "ended": 10, "pass_rate": r} for n, x, r in named],
    }


def further_keys(late, low, noop, goomba, pipes):
    """(final, last) keys of an eval_final.json with the late window, the secondary rows and hazards; ``late``,
    ``low``, ``noop``: (score, success rate) or None for a null entry."""
    window = None
    if late:
        weights = [{"weights_version": v, "env_steps": 1000 * v, "summary": summary(*late, 25), "episodes": []} for v in (1, 2)]
        window = {"epsilon": 0.05, "episodes_per_weights": 25, "weights": weights, "summary": summary(*late), "hazards": None}
    secondary = {
        "low_epsilon": low and {"epsilon": 0.01, "summary": summary(*low), "hazards": None, "episodes": []},
        "noop_greedy": noop and {"noop_max": 30, "summary": summary(*noop, 30), "hazards": None, "episodes": []},
    }
    return {"late_window": window, "secondary": secondary}, {"hazards": hazards(goomba, pipes)}


def test_the_further_rows_over_runs_and_for_baselines(tmp_path, capsys):
    """The late window, the low-epsilon and no-op rows and each hazard's pass rate, over the runs that have them (t),
    over episodes for one run; an old run without them is in the group but not in those rows."""
    rows = [
        ((2000, 0.2), (2500, 0.3), (2600, 0.4), 0.8, 0.5),
        ((2200, 0.3), (2700, 0.4), None, 0.7, None),
        ((2400, 0.4), (2900, 0.5), None, 0.9, 0.3),
    ]
    for seed, keys in enumerate(rows):
        final, last = further_keys(*keys)
        fake_run(tmp_path, f"n{seed}", 1e-4, seed, [2000] * 4, flags=1, label="new", final=final, last=last)
    fake_run(tmp_path, "old", 1e-4, 9, [1000] * 4, label="new")  # before the further evaluations
    base = tmp_path / "b.json"
    episodes = [{"score": x, "success": False, "return": 0.0, "length": 1} for x in (700, 900)]
    base.write_text(
        json.dumps(
            {
                "policy": "random",
                "epsilon": 1.0,
                "episodes": episodes,
                "secondary": {
                    "low_epsilon": {"epsilon": 0.01, "summary": summary(800, 0.0), "hazards": None},
                    "noop_greedy": None,
                },
                "hazards": hazards(0.75, None),
            }
        )
    )
    (g,), (b,), _ = report([str(tmp_path)], [str(base)])
    by = {r["row"]: r for r in g["rows"]}
    late = by["late window (epsilon 0.05, 2 weights x 25 episodes)"]
    # 2,000, 2,200, 2,400: SD 200, SE 115.470, half-width t_{0.975,2} x SE = 4.302653 x 115.470 = 496.827
    assert (late["runs"], late["score_mean"]) == (3, 2200.0) and late["interval"] == "95% t over 3 runs"
    assert late["score_mean_ci"] == pytest.approx([2200 - 496.827, 2200 + 496.827], abs=1e-2)
    # 20%, 30%, 40%: SD 0.1, SE 0.057735, half-width 0.248414
    assert late["success_rate_ci"] == pytest.approx([0.3 - 0.248414, 0.3 + 0.248414], abs=1e-5)
    assert late["per_run"][3] is None  # the old run
    noop = by["no-op greedy (0-30 no-ops, then epsilon 0)"]
    assert noop["runs"] == 1 and noop["score_mean_ci"] == [2500, 2700] and noop["interval"] == "95% over 30 episodes (one run)"
    goomba = by["hazard goomba (x 600-720): pass rate"]
    # 80%, 70%, 90%: mean 80%, half-width 0.248414; clipped at 100%
    assert goomba["pass_rate_mean"] == pytest.approx(0.8) and goomba["pass_rate_ci"] == pytest.approx([0.551586, 1.0], abs=1e-5)
    pipes = by["hazard pipes (x 1,100-1,300): pass rate"]
    assert pipes["runs"] == 2 and pipes["per_run"] == [0.5, None, 0.3, None]
    assert [r["key"] for r in b["rows"]] == ["low_epsilon", "hazard", "hazard"]
    assert main([str(tmp_path), "--baseline", str(base)]) == 0
    out = capsys.readouterr().out
    assert "| 2,000 (25%), 2,000 (25%), 2,000 (25%), 1,000 (0%) | 1,750 [954, 2,546] | 19% [0%, 39%] | 95% t over 4 runs |" in out
    assert (
        "| new: late window (epsilon 0.05, 2 weights x 25 episodes) | 3/4 | - | - | - | - "
        "| 2,000 (20%), 2,200 (30%), 2,400 (40%), - | 2,200 [1,703, 2,697] | 30% [5%, 55%] | 95% t over 3 runs | - |"
    ) in out
    assert "| new: low epsilon (0.01) | 3/4 |" in out
    assert "| new: hazard goomba (x 600-720): pass rate | 3/4 | - | - | - | - | 80%, 70%, 90%, - | - | 80% [55%, 100%] |" in out
    assert "| baseline: random, epsilon 1 (b.json): low epsilon (0.01) | 50 episodes | - | - | - | - | - | 800 [700, 900] " in out
    assert "| baseline: random, epsilon 1 (b.json): hazard goomba (x 600-720): pass rate | - | - | - | - | - " in out
    assert "| 40 reached, 10 ended there | - | 75% | - | - |" in out


def test_old_files_report_without_further_rows(tmp_path, capsys):
    """Runs and baselines from before the further evaluations: no further rows, the tables as before."""
    fake_run(tmp_path, "r", 1e-4, 1, [2000, 2200], flags=1)
    final, last = further_keys(None, None, None, None, None)  # null entries, hazards never reached
    fake_run(tmp_path, "s", 2e-4, 2, [2000, 2200], flags=1, final=final, last={"hazards": {"kind": "histogram", "edges": [0, 1]}})
    groups, _, _ = report([str(tmp_path)], [])
    assert [g["rows"] for g in groups] == [[], []]
    assert main([str(tmp_path)]) == 0
    assert ": late window" not in capsys.readouterr().out


def test_the_mde_line_under_the_group_table(tmp_path, capsys):
    for seed, (x, flags) in enumerate([(1000, 1), (2000, 2), (3000, 3)]):
        fake_run(tmp_path, f"a{seed}", 1e-4, seed, [x] * 4, flags=flags, label="a")
    for seed, (x, flags) in enumerate([(1500, 1), (2500, 2)]):
        fake_run(tmp_path, f"b{seed}", 1e-4, 10 + seed, [x] * 4, flags=flags, label="b")
    assert main([str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    mde = json.loads((tmp_path / "r.json").read_text())["mde"]
    # pooled SD of scores: variances 1,000,000 (2 df) and 500,000 (1 df): sqrt(2,500,000 / 3) = 912.871;
    # of success rates: 0.0625 (2 df) and 0.03125 (1 df): sqrt(0.15625 / 3) = 0.228218
    assert mde["sd_score"] == pytest.approx(912.871, abs=1e-3) and mde["sd_success_rate"] == pytest.approx(0.228218, abs=1e-6)
    assert [p["runs"] for p in mde["pairs"]] == [[3, 2], [4, 4], [6, 6]]
    # 3 vs 2: df 3, SE 912.871 x sqrt(1/3 + 1/2) = 833.333; (3.182446 + 0.978472) x 833.333 = 3,467.43
    assert mde["pairs"][0]["score"] == pytest.approx(3467.43, abs=0.01)
    assert mde["pairs"][0]["success_rate"] == pytest.approx(4.160918 * 0.228218 * 0.912871, abs=1e-5)  # 0.866858
    # 6 vs 6: df 10, (2.228139 + 0.879058) x 912.871 x sqrt(1/3) = 1,637.63
    assert mde["pairs"][2]["score"] == pytest.approx(1637.63, abs=0.01)
    assert "MDE (80% power, 95%; pooled SD between runs 913 score, 23 points of success rate): " in out
    assert "3 vs 2 runs: 3,467 score, 87 points of success rate; 4 vs 4 runs: " in out
    for f in tmp_path.glob("b*"):
        if f.is_dir():
            (f / "eval_final.json").unlink()
    capsys.readouterr()
    for f in tmp_path.glob("a[12]"):
        (f / "eval_final.json").unlink()
    assert main([str(tmp_path)]) == 0  # one evaluated run: no SD between runs
    assert "MDE: no group has two evaluated runs" in capsys.readouterr().out


def paired_runs(tmp_path):
    """Groups A (seeds 11-14) and B (seeds 11-13, 15): last scores, successes, further rows and probe figures."""
    a = {11: (2000, 2, (2100, 0.4)), 12: (1800, 1, (1900, 0.3)), 13: (2500, 2, None), 14: (1000, 0, None)}
    b = {11: (1500, 1, (1700, 0.2)), 12: (1900, 1, (2000, 0.3)), 13: (2100, 2, None), 15: (900, 0, None)}
    churn = {("A", 11): 0.3, ("A", 12): 0.5, ("A", 13): 0.2, ("B", 11): 0.6, ("B", 13): 0.4}  # B seed 12: no probes
    for label, runs in (("A", a), ("B", b)):
        for seed, (x, flags, late) in runs.items():
            final, last = further_keys(late, None, None, 0.5 + flags / 10, None)
            fake_run(tmp_path, f"{label}{seed}", 1e-4, seed, [x] * 4, flags=flags, label=label, final=final, last=last)
            if (label, seed) in churn:
                c = churn[(label, seed)]
                rows = [
                    {"env_steps": 100_000, "probe/churn": 9.0, "probe/gap": 9.0},  # before the last 20%: not counted
                    {"env_steps": 100_500, "learner/loss": 1.0},
                    {"env_steps": 160_000, "probe/churn": c - 0.1, "probe/gap": 2.0},  # 160,000 = 80% of 200,000
                    {"env_steps": 200_000, "probe/churn": c + 0.1, "probe/gap": 4.0},
                ]
                (tmp_path / f"{label}{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_mode_matches_runs_by_seed(tmp_path, capsys):
    paired_runs(tmp_path)
    out_json = tmp_path / "out" / "paired.json"
    assert main(["--paired", "A", "B", str(tmp_path), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    p = json.loads(out_json.read_text())
    assert (p["a"], p["b"], p["a_runs"], p["b_runs"], p["seeds"]) == ("A", "B", 4, 4, [11, 12, 13])
    assert [(u["group"], u["seed"]) for u in p["unmatched"]] == [("A", 14), ("B", 15)]
    by = {m["metric"]: m for m in p["metrics"]}
    score = by["last weights: score mean"]
    # differences 500, -100, 400: mean 266.667; SD sqrt((233.333^2 + 366.667^2 + 133.333^2) / 2) = 321.455;
    # SE 321.455 / sqrt(3) = 185.592; half-width 4.302653 x 185.592 = 798.54
    assert score["diffs"] == [500.0, -100.0, 400.0] and score["mean"] == pytest.approx(266.667, abs=1e-3)
    assert score["sd"] == pytest.approx(321.455, abs=1e-3) and score["se"] == pytest.approx(185.592, abs=1e-3)
    assert score["ci"] == pytest.approx([266.667 - 798.54, 266.667 + 798.54], abs=0.01)
    assert (score["positive"], score["negative"], score["ties"]) == (2, 1, 0)
    # MDE: (t_{0.975,2} + t_{0.8,2}) x SE = (4.302653 + 1.060660) x 185.592 = 995.39; n=4 and n=6 at the same SD
    mde = {e["n"]: e["mde"] for e in score["mde"]}
    assert mde[3] == pytest.approx(995.39, abs=0.01)
    assert mde[4] == pytest.approx((3.182446 + 0.978472) * 321.455 / 2, abs=0.01)  # 668.79
    assert mde[6] == pytest.approx((2.570582 + 0.919544) * 321.455 / 6**0.5, abs=0.01)  # 458.03
    rate = by["last weights: success rate"]  # 50%, 25%, 50% against 25%, 25%, 50%
    assert rate["diffs"] == [0.25, 0.0, 0.0] and (rate["positive"], rate["ties"]) == (1, 2)
    late = by["late window: score mean"]  # seeds 11 and 12 only: 400, -100
    assert (late["n"], late["diffs"], late["missing"]) == (2, [400.0, -100.0], [13])
    assert by["hazard goomba: pass rate"]["diffs"] == pytest.approx([0.1, 0.0, 0.0])
    churn = by["probe/churn (last 20% of env steps)"]  # A 0.3, 0.2 against B 0.6, 0.4 (seeds 11, 13)
    assert churn["seeds"] == [11, 13] and churn["diffs"] == pytest.approx([-0.3, -0.2]) and churn["missing"] == [12]
    assert by["probe/gap (last 20% of env steps)"]["a"] == [3.0, 3.0]
    assert "probe/gap_relative (last 20% of env steps)" not in by and "low epsilon: score mean" not in by
    assert "Paired: A = A (4 runs), B = B (4 runs); 3 seeds in both: 11, 12, 13. Left out" in out
    assert f"A seed 14 ({tmp_path / 'A14'}); B seed 15 ({tmp_path / 'B15'})." in out
    assert "| last weights: score mean | 3 | +267 [-532, +1,065] | 2 of 3 | 321 | 995 | 669 | 458 |" in out
    # 25, 0, 0 points: mean 8.33, SD 14.43, SE 8.33, half-width 4.302653 x 8.33 = 35.86: [-27.5, +44.2]
    assert "| last weights: success rate | 3 | +8.3 pts [-28, +44] | 1 of 3 (2 tied) | 14 pts | 45 pts | 30 pts | 21 pts |" in out
    assert "| late window: success rate (no figure for seed 13) | 2 | +10 pts [-100, +100] | 1 of 2 (1 tied) |" in out  # clipped
    assert "| probe/churn (last 20% of env steps) (no figure for seed 12) | 2 | -0.25 [-0.885, +0.385] | 0 of 2 |" in out
    assert "| last weights: score mean | 11 | 2,000 | 1,500 | +500 |" in out
    assert "| last weights: success rate | 12 | 25% | 25% | 0 pts |" in out
    assert "| hazard goomba: pass rate | 11 | 70% | 60% | +10 pts |" in out


def test_paired_mode_leaves_out_runs_still_training(tmp_path, capsys):
    """A run without eval_final.json (still training) is not paired, counted or listed as unmatched; a warning names it."""
    paired_runs(tmp_path)
    for name, label, seed in (("A16", "A", 16), ("B14", "B", 14)):  # B14 would pair with A14 if it counted
        (tmp_path / fake_run(tmp_path, name, 1e-4, seed, [500], label=label) / "eval_final.json").unlink()
    out_json = tmp_path / "out" / "paired.json"
    assert main(["--paired", "A", "B", str(tmp_path), "--json", str(out_json)]) == 0
    p = json.loads(out_json.read_text())
    assert (p["a_runs"], p["b_runs"], p["seeds"]) == (4, 4, [11, 12, 13])
    assert [(u["group"], u["seed"]) for u in p["unmatched"]] == [("A", 14), ("B", 15)]
    err = capsys.readouterr().err
    assert f"warning: {tmp_path / 'A16'}: no eval_final.json" in err and f"warning: {tmp_path / 'B14'}: no eval_final.json" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--paired", "A", "C"], "no group 'C' among the runs (groups: 'A', 'B')"),
        (["--paired", "A", "A"], "name two different groups"),
        (["--paired", "A", "B", "--plot", "x.png"], "no --baseline or --plot with it"),
    ],
)
def test_paired_mode_names_bad_input(tmp_path, capsys, args, message):
    paired_runs(tmp_path)
    assert main([*args, str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_paired_mode_refuses_two_runs_of_one_seed(tmp_path, capsys):
    paired_runs(tmp_path)
    fake_run(tmp_path, "A11bis", 1e-4, 11, [3000], label="A")
    assert main(["--paired", "A", "B", str(tmp_path)]) == 2
    assert "group 'A' has two runs of seed 11" in capsys.readouterr().err


def test_earlier_paired_reports_join_seed_by_seed(tmp_path, capsys):
    """A screen's pairs span sessions: the report over seeds 11-13's runs plus an earlier report of seeds 21-22 (from
    their runs, since gone) equals the report over all five seeds' runs, figure by figure."""
    first, second, both = tmp_path / "first", tmp_path / "second", tmp_path / "both"
    for folder in (first, second, both):
        folder.mkdir()
    paired_runs(first)
    for folder in (second, both):
        for label, x in (("A", 1200), ("B", 1000)):
            for seed in (21, 22):
                final, last = further_keys((x + seed, 0.1), None, None, 0.5, None)
                fake_run(folder, f"{label}{seed}", 1e-4, seed, [x + 10 * seed] * 4, flags=1, label=label, final=final, last=last)
    paired_runs(both)
    earlier, merged, direct = tmp_path / "earlier.json", tmp_path / "merged.json", tmp_path / "direct.json"
    assert main(["--paired", "A", "B", str(second), "--json", str(earlier)]) == 0
    assert main(["--paired", "A", "B", str(first), "--earlier", str(earlier), "--json", str(merged)]) == 0
    assert f"Seeds from earlier paired reports as well: {earlier}." in capsys.readouterr().out
    assert main(["--paired", "A", "B", str(both), "--json", str(direct)]) == 0
    m, d = json.loads(merged.read_text()), json.loads(direct.read_text())
    assert m["seeds"] == d["seeds"] == [11, 12, 13, 21, 22] and (m["a_runs"], m["b_runs"]) == (6, 6)
    assert m["metrics"] == d["metrics"]
    score = {x["metric"]: x for x in m["metrics"]}["last weights: score mean"]
    assert score["diffs"] == [500.0, -100.0, 400.0, 200.0, 200.0]
    # an earlier report alone, with no run folder, is a comparison too
    assert main(["--paired", "A", "B", "--earlier", str(earlier)]) == 0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text('{"groups": []}'), "not a paired report"),
        (lambda p: p.write_text("{"), "cannot read it as JSON"),
        (
            lambda p: main(["--paired", "B", "A", str(p.parent / "runs"), "--json", str(p)]),
            "it compares 'B' - 'A', not 'A' - 'B'",
        ),
        (
            lambda p: main(["--paired", "A", "B", str(p.parent / "runs"), "--json", str(p)]),
            "seed 11 is already in the comparison",
        ),
    ],
)
def test_earlier_paired_reports_name_bad_input(tmp_path, capsys, make, message):
    (tmp_path / "runs").mkdir()
    paired_runs(tmp_path / "runs")
    make(tmp_path / "earlier.json")
    assert main(["--paired", "A", "B", str(tmp_path / "runs"), "--earlier", str(tmp_path / "earlier.json")]) == 2
    assert message in capsys.readouterr().err
