"""With no compiler on PATH (as in the runtime image) the learner decides at start to run eager and says why,
instead of failing at its first compiled update."""

import os
import subprocess
import sys

from tests.support.paths import ROOT

BUILD = r"""
import sys, torch
from learner.loop import Learner
from tests.support.runs import small_config

cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch = False, True, 16
learner = Learner(cfg, sys.argv[1], torch.device("cpu"))
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
