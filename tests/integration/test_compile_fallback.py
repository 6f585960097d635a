"""With no compiler on PATH (as in the runtime image) the learner decides at start to run eager and says why,
instead of failing at its first compiled update."""

import os
import subprocess
import sys

from tests.support.paths import ROOT

BUILD = r"""
import sys, torch
from learner.loop import Learner
from shared.resolution import resolve_run
from tests.support.runs import small_config

cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch = False, True, 16
learner = Learner(resolve_run(cfg, device="cpu"), sys.argv[1])
print("compile:", learner.dqn.cfg.compile, flush=True)
learner.close()
"""


def test_no_compiler_on_path_runs_eager_and_says_so(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty"))  # python is started by its full path
    out = subprocess.run(
        [sys.executable, "-c", BUILD, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[MAIN] no compiler on PATH: torch.compile needs a C++ compiler on cpu, so the learner runs eager" in out.stdout
    assert "compile: False" in out.stdout


def test_the_decision_covers_cuda_where_triton_needs_a_c_compiler(tmp_path, monkeypatch):
    """On CUDA without a C compiler (the default image's runtime) the learner must also run eager: Triton builds a C
    launcher. The gpu image carries one (test_gpu_image.py)."""
    from learner.warm_up import missing_compiler

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert missing_compiler("cuda") == (
        "no compiler on PATH: torch.compile needs a C compiler (for Triton) on cuda, so the learner runs eager"
    )
    assert missing_compiler("cpu").startswith("no compiler on PATH: torch.compile needs a C++ compiler on cpu")
    (tmp_path / "bin").mkdir()
    cc = tmp_path / "bin" / "cc"
    cc.write_text("#!/bin/sh\n")
    cc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert missing_compiler("cuda") == ""  # a C compiler is enough for Triton
    assert missing_compiler("cpu")  # but not for the CPU backend's C++
