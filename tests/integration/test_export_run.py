"""A short fake-env training run exported with launch.tools.export and played back with launch.evaluate --pretrained,
each a subprocess as a user runs it."""

import json
import subprocess
import sys

from shared.agent_file import MAX_BYTES, load_agent
from tests.support.launcher import ROOT, TRAINING, run_fake

EVALUATED = ("--eval.every-env-steps", "400", "--eval.episodes", "2", "--eval.keep-snapshots", "1")
FINAL = ("--eval.select-episodes", "2", "--eval.final-episodes", "2", "--eval.late-episodes", "1")
ROWS = ("--eval.low-epsilon-episodes", "1", "--eval.noop-episodes", "1")


def test_a_run_exports_its_best_pt_and_the_file_plays_without_the_run(tmp_path):
    runs = tmp_path / "runs"
    run_fake(runs, *TRAINING, *EVALUATED, *FINAL, *ROWS, "--total-env-steps", "2000")
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    assert (run_dir / "best.pt").is_file()
    agent_path = tmp_path / "agents" / "fake.safetensors"
    export = [sys.executable, "-m", "launch.tools.export", str(run_dir), "--out", str(agent_path)]
    done = subprocess.run(export, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"[EXPORT] {agent_path}: ") and "best.pt of" in done.stdout, done.stdout
    assert 0 < agent_path.stat().st_size <= MAX_BYTES
    agent = load_agent(str(agent_path))
    assert agent.env.name == "fake" and agent.meta["source"]["file"] == "best.pt"
    assert isinstance(agent.meta["source"]["counters"]["weights_version"], int)

    played = tmp_path / "played.json"
    evaluate = [sys.executable, "-m", "launch.evaluate", "--pretrained", str(agent_path), "--episodes", "1"]
    done = subprocess.run([*evaluate, "--json", str(played)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(pretrained net)" in done.stdout and "greedy (eps 0)" in done.stdout, done.stdout
    data = json.loads(played.read_text())
    assert data["net"] == "pretrained" and data["env"]["name"] == "fake" and data["summary"]["episodes"] == 1
