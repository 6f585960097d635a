"""The evaluation rows past the main one: no-op starts (shared/evaluation/episodes.py), the final evaluation's late window and
secondary rows with their hazard tables (launch/final_eval.py), and the same rows in a baseline's JSON
(launch/evaluate.py). A run folder is made by hand on Catch (episodes of 9 steps), as launch.local leaves one."""

import json
import os

import numpy as np
import pytest
import torch

from launch.evaluate import main as evaluate
from launch.final_eval import final_evaluation
from learner.checkpoint import save_best, save_checkpoint, save_kept
from shared.config import EnvConfig, RunConfig
from shared.evaluation.episodes import build_network, episode_record, noop_counts, play_episodes
from shared.evaluation.protocol import episode_jobs
from shared.seeding import EVAL_LATE, EVAL_LOW_EPSILON, EVAL_NOOP, stream_seed

CATCH = EnvConfig(name="catch", frame_size=42)
KEPT = (3, 5, 7)  # weights versions in kept/
FINAL, LATE, LOW, NOOP, NOOP_MAX = 2, 2, 3, 4, 3


def fresh_weights(seed: int) -> dict:
    torch.manual_seed(seed)
    return build_network(CATCH).state_dict()


def make_run(folder, **eval_changes) -> RunConfig:
    """config.json, checkpoint.pt (v9), best.pt (another network, v4) and three kept weights of a Catch run."""
    os.makedirs(folder, exist_ok=True)
    cfg = RunConfig(seed=11, env=EnvConfig(name="catch", frame_size=42))
    cfg.eval.keep_snapshots = 0  # best.pt as it is: no selection
    cfg.eval.final_episodes, cfg.eval.late_episodes = FINAL, LATE
    cfg.eval.low_epsilon_episodes, cfg.eval.noop_episodes, cfg.eval.noop_max = LOW, NOOP, NOOP_MAX
    for key, value in eval_changes.items():
        setattr(cfg.eval, key, value)
    (folder / "config.json").write_text(cfg.to_json())
    counters = {"epoch": 1, "updates": 7, "weights_version": 9, "samples_trained": 70, "inserted": 900, "wall_seconds": 3.5}
    last = fresh_weights(0)
    save_checkpoint(
        str(folder), {"learner": {"online": last, "target": last, "updates": 7}, "counters": counters, "config": cfg.to_json()}
    )
    best = {"weights_version": 4, "inserted": 400, "updates": 3}
    save_best(str(folder), {"learner": {"online": fresh_weights(1)}, "counters": best, "config": cfg.to_json()})
    for v in KEPT:
        save_kept(
            str(folder),
            {"learner": {"online": fresh_weights(v)}, "counters": {"weights_version": v, "inserted": 100 * v, "updates": v}},
            keep=4,
        )
    return cfg


def test_no_op_starts_are_drawn_from_the_seed_and_played_first():
    net = build_network(CATCH)
    played = play_episodes(net, CATCH, 6, 0.0, seed=4, noop_max=5)
    again = play_episodes(net, CATCH, 6, 0.0, seed=4, noop_max=5)
    assert [e.noops for e in played] == noop_counts(4, 6, 5) and len({e.noops for e in played}) > 1
    for e in played:
        assert 0 <= e.noops <= 5 and e.length >= e.noops and e.actions[: e.noops].tolist() == [1] * e.noops  # "stay"
        assert episode_record(e)["noops"] == e.noops
    assert [episode_record(e) for e in played] == [episode_record(e) for e in again]
    assert [e.actions.tolist() for e in played] == [e.actions.tolist() for e in again]
    plain = play_episodes(net, CATCH, 2, 0.0, seed=4)
    assert all(e.noops is None and "noops" not in episode_record(e) for e in plain)
    assert noop_counts(4, 6, 0) == [0] * 6 and noop_counts(4, 3, 5) == noop_counts(4, 6, 5)[:3]
    with pytest.raises(ValueError, match="noop_max=-1"):
        play_episodes(net, CATCH, 1, 0.0, seed=4, noop_max=-1)


def test_mario_no_op_starts_press_noop_then_the_policy():
    pytest.importorskip("gym_super_mario_bros")
    mario = EnvConfig(max_episode_steps=30)
    played = play_episodes(None, mario, 3, 0.0, seed=2, policy="constant", action=4, noop_max=10)  # right+A+B
    assert [e.noops for e in played] == noop_counts(2, 3, 10)
    for e in played:
        assert e.length == 30 and e.actions.tolist() == [0] * e.noops + [4] * (30 - e.noops) and e.score > 40


def test_the_final_evaluation_adds_the_late_window_secondary_rows_and_hazards(tmp_path):
    run = tmp_path / "run"
    cfg = make_run(run)
    lines: list[str] = []
    evaluated = final_evaluation(str(run), processes=1, echo=lines.append)
    assert evaluated is not None
    result = evaluated.to_dict()
    assert json.loads((run / "eval_final.json").read_text()) == json.loads(json.dumps(result))
    for name in ("last", "best"):  # the main rows as before, with where their episodes end
        row = result[name]
        assert row["summary"]["episodes"] == FINAL and row["hazards"]["kind"] == "histogram"  # Catch names no hazards
        assert row["hazards"]["episodes"] == FINAL
        assert sum(row["hazards"]["counts"]) == FINAL - row["hazards"]["successes"]
    assert result["best"]["weights_version"] == 4 and not result["best"].get("same_as_last")

    late = result["late_window"]  # one row per kept weights file, oldest first, the same seeds for each
    assert late["epsilon"] == cfg.eval.epsilon and late["episodes_per_weights"] == LATE
    assert late["stream_seed"] == stream_seed(cfg.seed, EVAL_LATE)
    assert [w["weights_version"] for w in late["weights"]] == list(KEPT)
    assert [w["env_steps"] for w in late["weights"]] == [100 * v for v in KEPT]
    assert all(w["summary"]["episodes"] == len(w["episodes"]) == LATE for w in late["weights"])
    pooled = [e for w in late["weights"] for e in w["episodes"]]
    assert late["summary"]["episodes"] == late["hazards"]["episodes"] == len(KEPT) * LATE
    assert late["summary"]["score_mean"] == pytest.approx(np.mean([e["score"] for e in pooled]))

    low, noop = result["secondary"]["low_epsilon"], result["secondary"]["noop_greedy"]
    assert low["epsilon"] == 0.01 and low["stream_seed"] == stream_seed(cfg.seed, EVAL_LOW_EPSILON)
    assert low["summary"]["episodes"] == len(low["episodes"]) == low["hazards"]["episodes"] == LOW
    assert noop["noop_max"] == NOOP_MAX and noop["stream_seed"] == stream_seed(cfg.seed, EVAL_NOOP)
    assert noop["summary"]["episodes"] == len(noop["episodes"]) == noop["hazards"]["episodes"] == NOOP
    ((n, job_seed),) = episode_jobs(NOOP, noop["stream_seed"])  # one job: its episodes' no-op counts from its seed
    assert [e["noops"] for e in noop["episodes"]] == noop_counts(job_seed, n, NOOP_MAX)
    assert all(e["length"] >= e["noops"] for e in noop["episodes"])

    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "final/last_score" in line]
    for key, source in (("late", late), ("low_epsilon", low), ("noop", noop)):
        assert row[f"final/{key}_score"] == source["summary"]["score_mean"]
        assert row[f"final/{key}_success_rate"] == source["summary"]["success_rate"]
    said = "\n".join(lines)
    for start in (
        "[FINAL] and on streams of their own: the late window, 3 kept weights (v3-v7), 2 episodes each at epsilon 0.05; ",
        "[FINAL] last hazards: ends without success by score: ",
        "[FINAL] best hazards: ",
        "[FINAL] late window (3 kept weights x 2 episodes at epsilon 0.05): return mean ",
        "[FINAL]   v5 (500 env steps): return ",
        "[FINAL] late window hazards: ",
        "[FINAL] last at epsilon 0.01: return mean ",
        "[FINAL] last at epsilon 0.01 hazards: ",
        "[FINAL] last at epsilon 0 after 0-3 no-ops: return mean ",
        "[FINAL] last at epsilon 0 after 0-3 no-ops hazards: ",
    ):
        assert f"\n{start}" in f"\n{said}", (start, said)

    off = tmp_path / "off"  # rows at 0 episodes, and no kept weights to play: null, no figures, no lines
    make_run(off, late_episodes=0, low_epsilon_episodes=0, noop_episodes=0)
    evaluated = final_evaluation(str(off), processes=1, echo=lines.append)
    assert evaluated is not None
    result = evaluated.to_dict()
    assert result["late_window"] is None and result["secondary"] == {"low_epsilon": None, "noop_greedy": None}
    (row,) = [json.loads(line) for line in (off / "metrics.jsonl").read_text().splitlines()]
    assert "hazards" in result["last"] and not any(k.startswith(("final/late", "final/low", "final/noop")) for k in row)
    assert not any(line.startswith(("[FINAL] late", "[FINAL] last at")) for line in lines[len(said.splitlines()) :])


def test_a_baseline_json_holds_the_secondary_rows_and_hazards(tmp_path, capsys):
    out = tmp_path / "right.json"
    common = [
        "--env.name",
        "catch",
        "--episodes",
        "3",
        "--low-epsilon-episodes",
        "2",
        "--noop-episodes",
        str(NOOP),
        "--json",
        str(out),
    ]
    assert evaluate(["--policy", "constant", "--action", "right", "--epsilon", "0", *common]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["hazards"]["kind"] == "histogram" and data["hazards"]["episodes"] == 3
    low, noop = data["secondary"]["low_epsilon"], data["secondary"]["noop_greedy"]
    assert low["epsilon"] == 0.01 and low["stream_seed"] == stream_seed(0, EVAL_LOW_EPSILON) and len(low["episodes"]) == 2
    assert low["summary"]["episodes"] == low["hazards"]["episodes"] == 2
    assert noop["noop_max"] == 30 and noop["summary"]["episodes"] == len(noop["episodes"]) == NOOP  # EvalConfig's
    assert [e["noops"] for e in noop["episodes"]] == noop_counts(noop["stream_seed"], NOOP, 30)
    assert all(e["length"] == 9 for e in noop["episodes"])  # Catch ends after 9 steps, however many no-ops were drawn
    assert "[EVAL] hazards: " in printed and "[EVAL] constant at epsilon 0 after 0-30 no-ops: return mean " in printed

    assert evaluate(["--policy", "random", *common, "--low-epsilon-episodes", "0"]) == 0
    data = json.loads(out.read_text())
    assert data["secondary"]["low_epsilon"] is None and len(data["secondary"]["noop_greedy"]["episodes"]) == NOOP

    run = tmp_path / "run"  # a network's: the run's eval settings
    make_run(run, low_epsilon=0.2, noop_max=2)
    net_json = tmp_path / "net.json"
    argv = [str(run), "--net", "online", "--episodes", "2", "--noop-episodes", "3", "--json", str(net_json)]
    assert evaluate(argv) == 0
    data = json.loads(net_json.read_text())
    low, noop = data["secondary"]["low_epsilon"], data["secondary"]["noop_greedy"]
    assert (low["epsilon"], len(low["episodes"]), noop["noop_max"], len(noop["episodes"])) == (0.2, LOW, 2, 3)
    assert all(0 <= e["noops"] <= 2 for e in noop["episodes"]) and data["hazards"]["episodes"] == 2
    assert evaluate([str(run), "--noop-episodes", "-1"]) == 2
    assert "--noop-episodes=-1" in capsys.readouterr().err
