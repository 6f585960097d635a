"""launch.local as a user runs it: a real subprocess, real actors; it prints, stops and leaves nothing behind.

Every wait is for an event in the launcher's output (both actors delivered, an epoch, an evaluation) with a deadline
that only guards against a hang; the runs that end by themselves end on a budget of env steps or updates, or on a
--duration whose only assertions are that it ended cleanly and that its accounting adds up.
"""

import glob
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from launch.local import progress_budget
from shared.agent_file import MAX_BYTES, load_agent
from shared.config import RunConfig
from shared.resolution import resolve_config
from tests.support.launcher import (
    FAKE_BATCH,
    HANG_GUARD_S,
    ROOT,
    SMALL_LEARNER,
    STOPPED,
    TRAINING,
    Launcher,
    assert_all_gone,
    collect_until_exit,
    fake_run_cmd,
    last_line,
    processor_lines,
    run_to_the_end,
)
from tests.support.runs import free_base_port

EPOCH_BUFFER = r"\[MAIN\] Epoch (\d+) .*Buffer: ([\d,]+)"  # the epoch number, transitions in replay


def test_the_progress_bar_follows_the_budget_that_is_set():
    cfg = resolve_config(RunConfig())
    assert progress_budget(cfg) == ("env steps", 300_000)  # Mario's default budget
    cfg.total_env_steps = 0
    assert progress_budget(cfg) is None  # until Ctrl-C: no bar
    cfg.duration = 60
    assert progress_budget(cfg) == ("s", 60)
    cfg.learner.steps = 500
    assert progress_budget(cfg) == ("updates", 500)
    cfg.total_env_steps = 10_000
    assert progress_budget(cfg) == ("env steps", 10_000)
    cfg.collect_only, cfg.total_env_steps = True, 0
    assert progress_budget(cfg) == ("s", 60)  # collecting only makes no updates


def test_duration_ends_the_run_with_exit_zero_and_no_children(tmp_path):
    run, out = run_to_the_end(tmp_path, "--duration", "8", collect_only=True)
    assert re.match(STOPPED + r"--duration 8s reached: ", last_line(out)), out
    _, processed, _, per_actor = processor_lines(run)[-1]
    assert processed == sum(per_actor), out  # however much arrived in 8 s: each transition counted once
    assert len(list(tmp_path.glob("*/config.json"))) == 1


def test_total_env_steps_ends_a_collect_only_run_within_one_batch_of_the_budget(tmp_path):
    _, out = run_to_the_end(tmp_path, "--total-env-steps", "3000", collect_only=True)
    m = re.match(STOPPED + r"env-step budget: ([\d,]+) of --total-env-steps 3,000 env steps inserted: ", last_line(out))
    assert m, out
    assert 3000 <= int(m[1].replace(",", "")) < 3000 + FAKE_BATCH, out


def test_budgets_end_a_training_run_and_a_resume_continues_toward_the_same_budget(tmp_path):
    def train(*args) -> tuple[str, dict]:
        _, out = run_to_the_end(tmp_path, *args, collect_only=False)
        (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        return out, torch.load(run_dir / "checkpoint.pt", weights_only=True)["counters"]

    out, first = train(*TRAINING, "--learner.steps", "10")
    assert re.match(STOPPED + r"update budget: 10 of --learner.steps 10 updates: ", last_line(out)), out
    assert first["updates"] == 10, first
    assert "[MAIN] Epoch 1 " in out and ", Budget:" not in out, out  # the fake env has no default env-step budget
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]

    # a budget on the command line counts the whole run, resumes included; the env-step budget ends this one
    budget = first["inserted"] + 2000
    out, more = train("--resume", str(run_dir), "--learner.steps", "1000000", "--total-env-steps", str(budget))
    assert re.match(STOPPED + rf"env-step budget: [\d,]+ of --total-env-steps {budget:,} env steps inserted: ", last_line(out)), (
        out
    )
    assert budget <= more["inserted"] < budget + FAKE_BATCH, (budget, more)
    assert re.search(rf"\[MAIN\] Epoch \d+ - .*, Budget: [\d,]+ of {budget:,} env steps, ETA (-|\d+[hms])", out), out

    # a resume without a budget on the command line keeps the run's: nothing is left to do
    out, again = train("--resume", str(run_dir))
    assert re.match(STOPPED + rf"env-step budget: [\d,]+ of --total-env-steps {budget:,} ", last_line(out)), out
    assert (again["inserted"], again["updates"]) == (more["inserted"], more["updates"]), (again, more)


def test_ctrl_c_stops_every_process_with_exit_zero(tmp_path):
    run = Launcher(tmp_path, collect_only=True)
    try:
        run.wait_for_delivery(slots=2)
        seen = run.descendants()
        out = run.stop(timeout=60)  # Ctrl-C; a hang guard, not a speed check
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert re.match(STOPPED + r"a stop signal \(Ctrl-C or SIGTERM\): ", last_line(out)), out
    assert_all_gone(seen)


def test_ctrl_c_during_start_up_is_not_lost_and_stops_the_run_cleanly(tmp_path):
    """SIGINT as soon as the learner is built, before any actor runs: the run still ends, exit 0, nothing left."""
    run = Launcher(tmp_path, collect_only=True)
    try:
        run.wait_for(r"\[MAIN\] run folder ", timeout=HANG_GUARD_S)
        run.proc.send_signal(signal.SIGINT)
        seen = run.descendants()
        out, later = collect_until_exit(run)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert re.match(STOPPED + r"a stop signal", last_line(out)), out
    assert_all_gone(seen | later, at_least=0)  # the stop came before the actors were started, or just after


def test_a_killed_actor_is_restarted_and_the_run_continues(tmp_path):
    run = Launcher(tmp_path, collect_only=True)
    try:
        run.wait_for_delivery(slots=2)
        seen = run.descendants()
        actors = run.actors()
        assert len(actors) == 2, run.output
        killed_at = time.monotonic()
        actors[0].kill()  # SIGKILL, no chance to clean up
        ((_, m),) = run.wait_for(r"\[MAIN\] actor (\d) exited; restarted \(restarts: 1\)", timeout=HANG_GUARD_S, after=killed_at)
        run.wait_for(rf"\[MAIN\] actor {m[1]} now sends as incarnation", timeout=HANG_GUARD_S, after=killed_at)
        seen |= run.descendants()
        out = run.stop(timeout=60)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    _, processed, _, per_actor = processor_lines(run)[-1]
    assert min(per_actor) > 0 and processed == sum(per_actor), out
    assert_all_gone(seen)


def test_ctrl_c_while_training_writes_the_final_checkpoint(tmp_path):
    run = Launcher(tmp_path, *TRAINING, collect_only=False)
    try:
        run.wait_for(r"\[MAIN\] Epoch 1 ", timeout=HANG_GUARD_S)  # it has trained
        seen = run.descendants()
        out = run.stop(timeout=60)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["counters"]["updates"] >= 5
    assert f"{state['counters']['updates']} updates" in out  # the final checkpoint holds the last update
    assert not list(run_dir.glob("*.tmp-*"))
    assert_all_gone(seen)


def test_training_run_logs_env_steps_wall_clock_and_evaluations_in_plain_lines(tmp_path):
    run = Launcher(tmp_path, *TRAINING, "--eval.every-env-steps", "400", "--eval.episodes", "2", "--progress", collect_only=False)
    try:
        run.wait_for(r"\[MAIN\] best evaluation so far", timeout=HANG_GUARD_S)  # an evaluation, with best.pt saved
        first = int(run.wait_for(EPOCH_BUFFER, timeout=HANG_GUARD_S)[0][1][2].replace(",", ""))
        # an epoch from the 4th on whose replay grew since the first: on one core the learner may run several
        # epochs on what it has (the replay ratio allows it) before the niced actors get the CPU
        deadline = time.monotonic() + HANG_GUARD_S
        while not any(int(m[1]) >= 4 and int(m[2].replace(",", "")) > first for _, m in run.matches(EPOCH_BUFFER)):
            assert time.monotonic() < deadline and run.proc.poll() is None, run.output
            time.sleep(0.1)
        out = run.stop(timeout=60)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "\r" not in out  # stdout is a pipe: no progress-bar redraws, plain lines only
    assert re.search(r"\[MAIN\] Eval at [\d,]+ env steps \(weights v\d+, eps 0.05, 2 episodes\): score mean", out), out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all({"step", "env_steps", "wall_seconds"} <= set(r) for r in rows)
    epochs = [r for r in rows if "learner/loss" in r]
    evals = [r for r in rows if "eval/score" in r]
    assert len(epochs) >= 4 and evals, out
    steps = [r["env_steps"] for r in epochs]
    assert steps == sorted(steps) and steps[-1] > steps[0] > 0
    walls = [r["wall_seconds"] for r in epochs]
    assert walls == sorted(walls) and walls[0] > 0
    last = epochs[-1]
    assert last["actor/episodes"] > 0 and last["actor/score"] > 0  # FakeEnv's score = 3 * step > 0
    assert 0 <= last["actor/success_rate"] <= 1 and 0 < last["actor/epsilon"] <= 1
    assert all(r["eval/episodes"] == 2 and r["eval/epsilon"] == 0.05 and r["eval/score"] > 0 for r in evals)
    # the best-scoring evaluated weights are kept as best.pt, and launch.evaluate RUN_DIR plays them
    best = torch.load(run_dir / "best.pt", weights_only=True)
    top = max(evals, key=lambda r: (r["eval/success_rate"], r["eval/score"]))
    assert best["eval"]["score_mean"] == top["eval/score"] and best["eval"]["success_rate"] == top["eval/success_rate"]
    assert best["counters"]["weights_version"] == top["eval/weights_version"]
    assert set(best["learner"]["online"]) == set(torch.load(run_dir / "checkpoint.pt", weights_only=True)["learner"]["online"])
    assert out.count("[MAIN] best evaluation so far") >= 1
    assert f"[MAIN] play the best evaluated weights: python -m launch.evaluate {run_dir} " in out
    played = subprocess.run(
        [sys.executable, "-m", "launch.evaluate", str(run_dir), "--episodes", "2", "--json", str(tmp_path / "best.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert played.returncode == 0, played.stdout + played.stderr
    result = json.loads((tmp_path / "best.json").read_text())
    assert result["net"] == "best" and result["checkpoint"].endswith("best.pt")

    # launch.tools.export writes best.pt as one file that launch.evaluate --pretrained plays without the run folder
    agent_path = tmp_path / "agents" / "fake.safetensors"
    export = [sys.executable, "-m", "launch.tools.export", str(run_dir), "--out", str(agent_path)]
    done = subprocess.run(export, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"[EXPORT] {agent_path}: ") and "best.pt of" in done.stdout, done.stdout
    assert 0 < agent_path.stat().st_size <= MAX_BYTES
    agent = load_agent(str(agent_path))
    assert agent.env.name == "fake" and agent.meta["source"]["file"] == "best.pt"
    assert agent.meta["source"]["counters"]["weights_version"] == best["counters"]["weights_version"]
    evaluate = [sys.executable, "-m", "launch.evaluate", "--pretrained", str(agent_path), "--episodes", "1"]
    evaluate += ["--low-epsilon-episodes", "0", "--noop-episodes", "0"]  # the headline row is enough here
    done = subprocess.run(
        [*evaluate, "--json", str(tmp_path / "agent.json")], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(pretrained net)" in done.stdout and "greedy (eps 0)" in done.stdout, done.stdout
    data = json.loads((tmp_path / "agent.json").read_text())
    assert data["net"] == "pretrained" and data["env"]["name"] == "fake" and data["summary"]["episodes"] == 1


@pytest.mark.parametrize("samples_per_insert, paced_by", [("0.05", "actors"), ("64", "learner")])
def test_the_epoch_line_says_whether_the_actors_or_the_learner_set_the_pace(tmp_path, samples_per_insert, paced_by):
    """With the ratio held, a learner asked for 0.05 samples per transition spends more of its time waiting for
    experience than holding the actors (the actors set the pace), one asked for 64 the reverse (the learner sets it)."""
    base = free_base_port(4) + 2
    flags = ("--learner.exact-ratio", "--learner.samples-per-insert", samples_per_insert, "--learner.steps", "40")
    flags += ("--learner.ratio-slack", "64")  # the learner holds once it is 64 transitions ahead of its ratio
    cmd = fake_run_cmd(tmp_path, base, *SMALL_LEARNER, "--replay.capacity", "4096", "--eval.every-env-steps", "0")
    proc = subprocess.run(
        [*cmd, "--eval.final-episodes", "0", *flags], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S * 2
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = re.findall(r"Learner waiting: (\d+)%, Actors held: (\d+)%", proc.stdout)
    (metrics,) = glob.glob(str(tmp_path / "*" / "metrics.jsonl"))
    with open(metrics, encoding="utf-8") as fh:
        rows = [r for r in map(json.loads, fh) if "learner/starved_share" in r]
    assert len(lines) == len(rows) >= 4, proc.stdout[-3000:]
    later = rows[len(rows) // 2 :]  # past the first epochs, while the ratio's slack fills
    waiting = sum(r["learner/starved_share"] for r in later) / len(later)
    held = sum(r["learner/holding_share"] for r in later) / len(later)
    assert all(0.0 <= r["learner/starved_share"] + r["learner/holding_share"] <= 1.0 + 1e-9 for r in rows), rows
    # which share leads says who sets the pace; the other side's share is near 0 by construction (a learner 64
    # transitions past its ratio holds the actors; one far below it never does), whatever the machine's speed
    if paced_by == "actors":
        assert waiting > held and held < 0.1, (waiting, held)
    else:
        assert held > waiting and waiting < 0.1, (waiting, held)
