"""launch.local as a user runs it: a real subprocess, real actors; it prints, stops and leaves nothing behind."""

import os
import re
import signal
import subprocess
import sys
import time

import psutil

from tests.conftest import free_base_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_launcher(tmp_path, *args, collect_only=True):
    base = free_base_port(4) + 2
    cmd = [sys.executable, "-m", "launch.local", "--actors", "2", "--log-every", "1", "--no-progress",
           "--env.name", "fake", "--transport.base-port", str(base), "--run-dir", str(tmp_path), *args]
    if collect_only:
        cmd.append("--collect-only")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def children_seen(proc, seconds):
    """Collect the launcher's descendants while it runs."""
    seen = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen.update(psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    return seen


def last_processor_line(output):
    lines = [line for line in output.splitlines() if line.startswith("[PROCESSOR] Processed:")]
    assert lines, output
    match = re.search(r"Processed: ([\d,]+), .*Per actor: \[(\d+), (\d+)\]", lines[-1])
    assert match, lines[-1]
    return [int(g.replace(",", "")) for g in match.groups()]


def assert_all_gone(children):
    assert len(children) >= 2
    time.sleep(0.2)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive


def test_duration_ends_the_run_with_exit_zero_and_no_children(tmp_path):
    proc = start_launcher(tmp_path, "--duration", "8")
    children = children_seen(proc, 60)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    processed, first, second = last_processor_line(out)
    assert first > 0 and second > 0 and processed == first + second
    assert_all_gone(children)
    assert len(list(tmp_path.glob("*/config.json"))) == 1


def test_ctrl_c_stops_every_process_with_exit_zero(tmp_path):
    proc = start_launcher(tmp_path)
    children = children_seen(proc, 6)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)  # a hang guard, not a speed check
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert_all_gone(children)


def test_a_killed_actor_is_restarted_and_the_run_continues(tmp_path):
    proc = start_launcher(tmp_path, "--duration", "14")
    children = children_seen(proc, 5)
    actors = [c for c in children if "spawn_main" in " ".join(c.cmdline()) and "resource_tracker" not in " ".join(c.cmdline())]
    assert len(actors) >= 2
    actors[0].kill()  # SIGKILL, no chance to clean up
    children |= children_seen(proc, 60)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert re.search(r"\[MAIN\] actor \d exited; restarted \(restarts: 1\)", out), out
    processed, first, second = last_processor_line(out)
    assert first > 0 and second > 0
    assert_all_gone(children)


def test_ctrl_c_while_training_writes_the_final_checkpoint(tmp_path):
    import torch

    proc = start_launcher(tmp_path, "--learner.no-compile", "--learner.micro-batch", "16", "--learner.min-replay", "300",
                          "--learner.updates-per-epoch", "5", "--replay.capacity", "4096", collect_only=False)
    seen, deadline = set(), time.monotonic() + 60
    trained = False
    while time.monotonic() < deadline and not trained:  # wait until it has trained (an epoch is in metrics.jsonl)
        seen |= children_seen(proc, 1)
        trained = any(p.stat().st_size > 0 for p in tmp_path.glob("*/metrics.jsonl"))
    assert trained and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["counters"]["updates"] >= 5
    assert f"{state['counters']['updates']} updates" in out  # the final checkpoint holds the last update
    assert not list(run_dir.glob("*.tmp-*"))
    assert_all_gone(seen)


def test_training_run_logs_env_steps_wall_clock_and_evaluations_in_plain_lines(tmp_path):
    import json

    import torch

    proc = start_launcher(tmp_path, "--duration", "30", "--learner.no-compile", "--learner.micro-batch", "16",
                          "--learner.min-replay", "300", "--learner.updates-per-epoch", "5",
                          "--replay.capacity", "4096", "--eval.every", "2", "--eval.episodes", "2", "--progress",
                          collect_only=False)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "\r" not in out  # stdout is a pipe: no progress-bar redraws, plain lines only
    assert re.search(r"\[MAIN\] Eval at [\d,]+ env steps \(weights v\d+, eps 0.05, 2 episodes\): x_pos mean", out), out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all({"step", "env_steps", "wall_seconds"} <= set(r) for r in rows)
    epochs = [r for r in rows if "learner/loss" in r]
    evals = [r for r in rows if "eval/x_pos" in r]
    assert len(epochs) >= 4 and evals, out
    steps = [r["env_steps"] for r in epochs]
    assert steps == sorted(steps) and steps[-1] > steps[0] > 0
    walls = [r["wall_seconds"] for r in epochs]
    assert walls == sorted(walls) and 0 < walls[-1] < 60
    last = epochs[-1]
    assert last["actor/episodes"] > 0 and last["actor/distance"] > 0  # FakeEnv x_pos = 3 * step: max x_pos > 0
    assert 0 <= last["actor/flag_rate"] <= 1 and 0 < last["actor/epsilon"] <= 1
    assert all(r["eval/episodes"] == 2 and r["eval/epsilon"] == 0.05 and r["eval/x_pos"] > 0 for r in evals)
    # the best-scoring evaluated weights are kept as best.pt, and launch.evaluate RUN_DIR plays them
    best = torch.load(run_dir / "best.pt", weights_only=True)
    top = max(evals, key=lambda r: (r["eval/flag_rate"], r["eval/x_pos"]))
    assert best["eval"]["x_pos_mean"] == top["eval/x_pos"] and best["eval"]["flag_rate"] == top["eval/flag_rate"]
    assert best["counters"]["weights_version"] == top["eval/weights_version"]
    assert set(best["learner"]["online"]) == set(torch.load(run_dir / "checkpoint.pt", weights_only=True)["learner"]["online"])
    assert out.count("[MAIN] best evaluation so far") >= 1
    assert f"[MAIN] play the best evaluated weights: python -m launch.evaluate {run_dir} " in out
    played = subprocess.run([sys.executable, "-m", "launch.evaluate", str(run_dir), "--episodes", "2",
                             "--json", str(tmp_path / "best.json")], capture_output=True, text=True, timeout=120)
    assert played.returncode == 0, played.stdout + played.stderr
    result = json.loads((tmp_path / "best.json").read_text())
    assert result["net"] == "best" and result["checkpoint"].endswith("best.pt")
