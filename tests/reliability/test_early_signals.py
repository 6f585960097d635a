"""A stop signal that comes while a program is still starting ends it cleanly: each entry point takes SIGTERM from its
first line (as PID 1 in a container a default SIGTERM would be ignored), here while it waits for its key files."""

import os
import signal
import subprocess
import sys

import pytest

from tests.support.launcher import HANG_GUARD_S
from tests.support.paths import ROOT
from tests.support.runs import free_base_port


@pytest.mark.parametrize("program", ["launch.learner", "launch.actor"])
def test_a_sigterm_during_the_key_wait_ends_the_program_with_exit_0(tmp_path, program):
    keys = tmp_path / "keys"  # never written: the program waits for them
    base = free_base_port(4) + 2
    if program == "launch.learner":
        args = ["--actors", "1", "--run-dir", str(tmp_path / "runs"), "--transport.base-port", str(base)]
        args += ["--transport.curve-server-secret", str(keys / "learner.key_secret")]
        args += ["--transport.curve-authorized-dir", str(keys / "allowed")]
    else:
        args = ["--learner", f"127.0.0.1:{base}", "--env.name", "fake"]
        args += ["--transport.curve-client-secret", str(keys / "actor.key_secret")]
        args += ["--transport.curve-server-public", str(keys / "learner.key")]
    env = dict(os.environ, WARPPIPE_KEY_WAIT="600")
    cmd = [sys.executable, "-m", program, *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:  # the program says it waits (a hang guard below bounds the whole test)
            lines.append(line)
            if line.startswith("[KEYS] waiting up to 600s"):
                break
        assert lines and lines[-1].startswith("[KEYS] waiting"), "".join(lines)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=HANG_GUARD_S)[0]
        assert proc.returncode == 0, "".join(lines) + out  # ended by the signal, not after the 600 s wait
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
