"""Ctrl-C on a 4-actor training run: every process is gone within 10 s, exit 0, the final checkpoint written."""

import re
import signal
import time

import psutil
import torch

from tests.launcher import EPOCH, TRAINING, Launcher

EXIT_BOUND_S = 10.0  # the promise: every process exits within 10 s of Ctrl-C


def test_ctrl_c_while_training_with_4_actors_exits_0_within_10s_with_the_final_checkpoint(tmp_path):
    run = Launcher(tmp_path, "--actors", "4", *TRAINING)
    try:
        run.wait_for(EPOCH, timeout=120, count=3)  # training, with updates since the first epoch
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(run.actors()) < 4:
            time.sleep(0.2)
        every = run.descendants() | {psutil.Process(run.proc.pid)}
        assert len(run.actors()) == 4, run.output

        run.proc.send_signal(signal.SIGINT)
        sent_at = time.monotonic()
        run.proc.wait(timeout=60)  # a hang guard; the bound is checked below
        exited_s = time.monotonic() - sent_at
        while time.monotonic() - sent_at < 60 and any(_running(p) for p in every):
            time.sleep(0.02)
        all_gone_s = time.monotonic() - sent_at
        out = run.stop()
    finally:
        run.kill()
    print(f"\nCtrl-C: launcher exited after {exited_s:.2f}s, all {len(every)} processes gone after {all_gone_s:.2f}s "
          f"(bound {EXIT_BOUND_S}s)")
    assert run.proc.returncode == 0, out
    assert all_gone_s <= EXIT_BOUND_S, out
    assert "Traceback" not in out, out
    assert re.search(r"actor exit codes \[0, 0, 0, 0\]", out), out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    updates = int(re.search(r"\[MAIN\] stopped after [\d.]+s by a stop signal \(Ctrl-C or SIGTERM\): epoch \d+, (\d+) updates", out)[1])
    print(f"checkpoint holds {state['counters']['updates']} updates; the run stopped at {updates}")
    assert state["counters"]["updates"] == updates >= 10  # the last update count, not an older periodic checkpoint
    assert not list(run_dir.glob("*.tmp-*"))


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
