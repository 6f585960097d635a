"""The run's seed and the end-of-run evaluation (shared/seeding.py, launch/final_eval.py).

End to end on the fake env: a training run that evaluated three times is stopped with Ctrl-C; it then
chooses best.pt between its last weights and its snapshots on fresh episodes and plays the last and the best weights on more, and
``python -m launch.final_eval`` on the same folder gives exactly the same figures again.
"""

import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import torch

from shared.config import ConfigError, RunConfig
from shared.config_migration import read_config
from shared.envs import with_stage
from shared.evaluation.protocol import EPISODES_PER_JOB, choose_best, describe, episode_jobs, play_job
from shared.resolution import resolve_config
from shared.seeding import EVAL_FINAL, EVAL_ROUND, EVAL_SELECT, draw_seed, stream_seed
from tests.support.launcher import HANG_GUARD_S, ROOT, TRAINING, Launcher, assert_all_gone

KEEP, SELECT, FINAL = 3, 3, 7  # FINAL > EPISODES_PER_JOB: each weights' final episodes go out in two jobs
# the late window and the secondary rows, small (their layout: tests/integration/test_eval_rows.py)
SMALL_ROWS = ("--eval.late-episodes", "1", "--eval.low-epsilon-episodes", "2", "--eval.noop-episodes", "2")


def test_component_seeds_follow_the_run_seed_unless_set():
    cfg = RunConfig()
    assert cfg.seed == -1 and (cfg.actor.seed, cfg.learner.seed, cfg.eval.seed) == (-1, -1, -1)  # not drawn yet
    cfg.seed = 7
    resolved = resolve_config(cfg)
    assert (resolved.actor.seed, resolved.learner.seed, resolved.eval.seed) == (7, 7, 7)
    cfg.learner.seed = 3  # varied alone
    cfg.seed = 8
    resolved = resolve_config(cfg)
    assert (resolved.actor.seed, resolved.learner.seed, resolved.eval.seed) == (8, 3, 8)
    saved = read_config(resolved.to_json())
    assert (saved.seed, saved.actor.seed, saved.learner.seed, saved.eval.seed) == (8, 8, 3, 8)


@pytest.mark.parametrize(
    "field,value",
    [
        ("seed", -2),
        ("seed", 2**31),
        ("seed", 1.5),
        ("actor.seed", 2**31),
        ("eval.final_episodes", -1),
        ("eval.select_episodes", 1),
        ("eval.keep_snapshots", 21),
    ],
)
def test_bad_seeds_and_final_evaluation_sizes_are_refused_by_name(field, value):
    cfg = RunConfig()
    owner, name = (cfg, field) if "." not in field else (getattr(cfg, field.split(".")[0]), field.split(".")[1])
    setattr(owner, name, value)
    with pytest.raises(ConfigError, match=f"{field}={value!r}"):
        resolve_config(cfg)


def test_seed_streams_are_distinct_by_purpose_round_and_neighbouring_seeds():
    keys = [(s, EVAL_ROUND, r) for s in range(3) for r in range(50)] + [
        (s, purpose) for s in range(3) for purpose in (EVAL_SELECT, EVAL_FINAL)
    ]
    seeds = [stream_seed(*k) for k in keys]
    assert len(set(seeds)) == len(seeds)
    assert stream_seed(5, EVAL_FINAL) == stream_seed(5, EVAL_FINAL)  # a function of its keys only
    drawn = {draw_seed() for _ in range(64)}
    assert len(drawn) == 64 and all(0 <= s < 2**31 for s in drawn)


def test_describe_gives_the_mean_and_success_rate_with_intervals_around_them():
    records = [{"score": x, "success": x >= 3000, "return": x / 10, "length": 100} for x in (500, 1000, 1500, 3100, 3200)]
    d = vars(describe(records))
    assert (d["episodes"], d["successes"], d["score_mean"], d["score_median"]) == (5, 2, 1860.0, 1500.0)
    assert d["success_rate"] == 0.4 and d["return_mean"] == 186.0 and d["length_mean"] == 100.0
    assert d["score_ci"][0] < 1860.0 < d["score_ci"][1] and 500 <= d["score_ci"][0] and d["score_ci"][1] <= 3200
    # Wilson's interval for 2 of 5 at 95%: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    z, n, p = 1.959963984540054, 5, 0.4
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert d["success_rate_ci"] == pytest.approx([(centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)])
    same = vars(describe([{"score": 700, "success": False, "return": 1.0, "length": 9}] * 3))  # no spread: a point
    assert same["score_ci"] == [700.0, 700.0] and same["success_rate_ci"][0] == 0.0


def test_best_pt_is_the_last_weights_unless_a_snapshot_beats_them_beyond_chance():
    rng = np.random.default_rng(0)
    last = list(rng.normal(1_000, 300, 30))
    clearly = list(rng.normal(2_000, 300, 30))  # p far below 0.05 / 3
    noisy = [x + 50 for x in last[::-1]]  # a higher mean, within chance (p about 0.26)
    assert choose_best(last, []) is None
    assert choose_best(last, [noisy]) is None
    assert choose_best(last, [noisy, clearly, noisy]) == 1
    better = list(rng.normal(2_500, 300, 30))
    assert choose_best(last, [clearly, better]) == 1  # both pass: the higher mean
    # Bonferroni: a p-value between 0.05 / 3 and 0.05 passes alone and fails among three snapshots
    from scipy import stats

    for shift in range(0, 400, 5):
        candidate = [x + shift for x in last[::-1]]
        p = stats.ttest_ind(candidate, last, equal_var=False, alternative="greater").pvalue
        if 0.05 / 3 < p < 0.05:
            break
    assert 0.05 / 3 < p < 0.05
    assert choose_best(last, [candidate]) == 0 and choose_best(last, [candidate, last, last]) is None
    assert choose_best([700.0] * 5, [[700.0] * 5]) is None and choose_best([700.0] * 5, [[900.0] * 5]) == 0


def test_episode_jobs_split_a_stream_the_same_way_whatever_the_cores():
    assert EPISODES_PER_JOB == 5
    jobs = episode_jobs(12, seed=7)
    assert [n for n, _ in jobs] == [5, 5, 2] and [s for _, s in jobs] == [stream_seed(7, k) for k in range(3)]
    assert episode_jobs(5, seed=7) == jobs[:1] and episode_jobs(1, seed=7) == [(1, stream_seed(7, 0))]
    assert len({s for _, s in episode_jobs(50, seed=7)}) == 10
    with pytest.raises(ValueError, match="episodes=0"):
        episode_jobs(0, seed=7)


def test_a_run_ends_with_best_pt_chosen_on_fresh_episodes_and_a_final_evaluation_that_repeats(tmp_path):
    run = Launcher(
        tmp_path,
        *TRAINING,
        "--eval.every-env-steps",
        "400",
        "--eval.episodes",
        "2",
        "--eval.keep-snapshots",
        str(KEEP),
        "--eval.select-episodes",
        str(SELECT),
        "--eval.final-episodes",
        str(FINAL),
        *SMALL_ROWS,
        collect_only=False,
    )
    try:
        run.wait_for(r"\[MAIN\] Eval at ", timeout=HANG_GUARD_S, count=3)
        seen = run.descendants()
        out = run.stop(timeout=HANG_GUARD_S)  # Ctrl-C: the final evaluation follows, then the last line
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "[MAIN] the final evaluation follows; Ctrl-C again skips it" in out, out
    assert out.rstrip().splitlines()[-1].startswith("[MAIN] stopped after "), out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    cfg = read_config((run_dir / "config.json").read_text())
    assert 0 <= cfg.seed < 2**31 and cfg.eval.seed == cfg.seed and f"[MAIN] seed {cfg.seed}\n" in out + "\n", out

    result = json.loads((run_dir / "eval_final.json").read_text())
    snapshots = sorted((run_dir / "snapshots").glob("v*.pt"))
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = {r["eval/weights_version"] for r in evals if "eval/score" in r}
    assert 1 <= len(snapshots) <= KEEP and len(snapshots) == min(KEEP, len(evaluated))
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert result["env_steps"] == checkpoint["counters"]["inserted"] and result["updates"] == checkpoint["counters"]["updates"]
    c = checkpoint["counters"]
    assert result["samples_per_transition"] == c["samples_trained"] / c["inserted"] > 0
    assert result["stream_seed"] == stream_seed(cfg.eval.seed, EVAL_FINAL)
    assert result["last"]["summary"]["episodes"] == result["best"]["summary"]["episodes"] == FINAL
    assert len(result["last"]["episodes"]) == FINAL and result["last"]["greedy"]["length"] > 0
    assert result["last"]["weights_version"] == checkpoint["counters"]["weights_version"]
    assert "ema" not in result and "ema" not in checkpoint["learner"]
    best = torch.load(run_dir / "best.pt", weights_only=True)
    selection = result["selection"]  # the last weights, then each snapshot, on the same fresh episodes
    assert [s["weights"] for s in selection] == ["last"] + ["snapshot"] * len(snapshots)
    assert all(s["fresh"]["episodes"] == len(s["score"]) == SELECT for s in selection)
    chosen = choose_best(selection[0]["score"], [s["score"] for s in selection[1:]])
    pick = selection[0 if chosen is None else chosen + 1]
    assert best["counters"]["weights_version"] == pick["weights_version"] == result["best"]["weights_version"]
    assert best["eval"]["score_mean"] == pick["fresh"]["score_mean"] and best["eval"]["episodes"] == SELECT
    source = (
        checkpoint if chosen is None else torch.load(run_dir / "snapshots" / f"v{pick['weights_version']}.pt", weights_only=True)
    )
    assert all(torch.equal(best["learner"]["online"][k], v) for k, v in source["learner"]["online"].items())
    assert result["best"].get("same_as_last", False) == (chosen is None)
    job = dict(
        env=with_stage(cfg.env, cfg.eval.stage),
        net=cfg.net,
        epsilon=cfg.eval.epsilon,
        weights=checkpoint["learner"]["online"],
        episodes=FINAL - EPISODES_PER_JOB,
        seed=episode_jobs(FINAL, result["stream_seed"])[1][1],
        greedy=False,
    )
    assert play_job(job)["episodes"] == result["last"]["episodes"][EPISODES_PER_JOB:]  # the second job, in place
    final_rows = [r for r in evals if "final/last_score" in r]
    assert len(final_rows) == 1 and final_rows[0]["final/last_score"] == result["last"]["summary"]["score_mean"]
    assert f"[FINAL] wrote {run_dir / 'eval_final.json'}" in out
    assert_all_gone(seen)

    checkpoint["learner"]["ema"] = checkpoint["learner"]["online"]  # as runs that kept the retired moving average saved
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    again = subprocess.run(
        [sys.executable, "-m", "launch.final_eval", str(run_dir), "--processes", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    repeated = json.loads((run_dir / "eval_final.json").read_text())
    assert "ema" not in repeated  # an old checkpoint's moving average is ignored
    for name in ("last", "best"):  # same weights, same seeds, a deterministic env: the same episodes
        assert repeated[name]["episodes"] == result[name]["episodes"]
    assert repeated["secondary"] == result["secondary"] and repeated["late_window"] == result["late_window"]
    assert [len(result["secondary"][k]["episodes"]) for k in ("low_epsilon", "noop_greedy")] == [2, 2]
    assert np.array_equal(
        [s["fresh"]["score_mean"] for s in repeated["selection"]], [s["fresh"]["score_mean"] for s in result["selection"]]
    )


def test_final_eval_refuses_a_folder_without_a_checkpoint(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "launch.final_eval", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert proc.returncode == 2 and f"run_dir={str(tmp_path)!r} has no checkpoint.pt" in proc.stderr


def test_a_second_ctrl_c_skips_the_final_evaluation_and_leaves_no_worker(tmp_path):
    run = Launcher(
        tmp_path,
        *TRAINING,
        "--eval.every-env-steps",
        "400",
        "--eval.episodes",
        "1",
        "--eval.final-episodes",
        "1000",
        collect_only=False,
    )
    try:
        run.wait_for(r"\[MAIN\] best evaluation so far", timeout=HANG_GUARD_S)  # best.pt: two contenders, two workers
        run.proc.send_signal(signal.SIGINT)
        run.wait_for(r"\[FINAL\] final evaluation: ", timeout=HANG_GUARD_S)  # 2 x 1,000 episodes: minutes
        deadline, workers = time.monotonic() + HANG_GUARD_S, []
        while len(workers) < 2 and time.monotonic() < deadline:  # the pool's workers (2 x 200 jobs; one per core)
            workers = [p for p in run.descendants() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.1)
        seen = set(workers)
        out = run.stop(timeout=HANG_GUARD_S)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (
        f"[MAIN] final evaluation skipped; the checkpoint and snapshots are kept: python -m launch.final_eval {run_dir}" in out
    ), out
    assert not (run_dir / "eval_final.json").exists() and (run_dir / "checkpoint.pt").exists()
    assert out.rstrip().splitlines()[-1].startswith("[MAIN] stopped after "), out
    assert_all_gone(seen)
