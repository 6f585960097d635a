"""launch/benchmark/gpu_session.sh's CPU dry run (``DRY_RUN=1``): every step, flag and path of the GPU session at a
tiny size (the CPU, the fake env, a 40-update run with a 2-episode final evaluation). It exits 0 with every step
passed, leaves at most the device tool's 8 files in $OUT, and its session.tar.gz holds each step's files and the
run's small files, no checkpoint."""

import csv
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests.support.paths import ROOT
from tests.support.runs import free_base_port

SCRIPT = os.path.join(ROOT, "launch", "benchmark", "gpu_session.sh")
STEPS = ["wheels", "scipy", "test-cuda", "host", "ceiling-actors", "ceiling-cores", "learner", "run"]
EXPECTED = {
    "steps.tsv",
    "summary.txt",
    "test-cuda.log",
    "host.log",
    "gpu.csv",
    "lscpu.txt",
    "lscpu-e.txt",
    "machine.json",
    "ceiling-actors.log",
    "ceiling-actors.json",
    "ceiling-cores.log",
    "ceiling-cores.json",
    "learner.log",
    "learner.json",
    "run.log",
    "gpu-util.csv",
    "gpu-util.txt",
    "run/config.json",
    "run/machine.json",
    "run/metrics.jsonl",
    "run/eval_final.json",
}
"""What session.tar.gz must hold after a dry run: every step's log, the JSON outputs, the GPU sampling and its figure,
the run's small files and the two tables."""
DEVICE_FILES, DEVICE_FILE_BYTES = 8, 16 << 20  # the device tool brings back at most 8 files of 16 MiB from $OUT


@pytest.mark.slow
@pytest.mark.timeout(1300)  # a hang guard: the dry run is bounded by work (updates, episodes), its limits stretched 4x
def test_gpu_session_dry_run_fits_the_device_limits(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, DRY_RUN="1", OUT=str(out), WORK=str(work), PY=sys.executable, BASE_PORT=str(free_base_port(4) + 2))
    proc = subprocess.run(["bash", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    returned = [p for p in out.rglob("*") if p.is_file()]
    assert len(returned) <= DEVICE_FILES and all(p.stat().st_size < DEVICE_FILE_BYTES for p in returned), returned
    assert {p.name for p in returned} == {"session.tar.gz", "steps.tsv", "summary.txt"}, returned

    rows = list(csv.DictReader(io.StringIO((out / "steps.tsv").read_text()), delimiter="\t"))
    assert [r["step"] for r in rows] == STEPS, rows
    assert rows[0]["rc"] == "skip" and all(r["rc"] == "0" for r in rows[1:]), rows  # scipy is a declared dependency

    with tarfile.open(out / "session.tar.gz") as tar:
        names = set(tar.getnames())
        missing = EXPECTED - names
        assert not missing, (sorted(missing), sorted(names))
        assert not [n for n in names if n.endswith(".pt") or n.startswith("runs/")], sorted(names)

        def read(name):
            member = tar.extractfile(name)
            assert member is not None, name
            return member.read().decode()

        assert read("steps.tsv") == (out / "steps.tsv").read_text()
        config = json.loads(read("run/config.json"))
        assert config["device"] == "cpu" and config["env"]["name"] == "fake" and config["learner"]["steps"] == 40
        final = json.loads(read("run/eval_final.json"))
        assert final["env"] == "fake" and final["last"]["summary"]["episodes"] == 2
        learner = json.loads(read("learner.json"))["learner"]
        assert learner["device"] == "cpu" and learner["micro_batch"] == 16 and "split" in learner
        for name in ("ceiling-actors.json", "ceiling-cores.json"):
            assert json.loads(read(name))["env_ceiling"]["steps_per_s"] > 0, name
        assert "skipped" in read("test-cuda.log")  # no GPU in a dry run: test_cuda's path runs, its tests skip
        samples = read("gpu-util.csv").splitlines()
        assert samples[0] == "unix_time,epoch_lines,utilization_pct,memory_mib" and len(samples) > 1, samples
        assert read("gpu-util.txt").startswith("GPU utilization"), read("gpu-util.txt")
