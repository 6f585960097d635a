"""A full disk costs a run records, not the run: every writer of the learner says and counts what the disk refused,
training goes on, and what failed is written again once there is room (shared/writes.py)."""

import errno
import json
import os
import signal
import subprocess

import pytest

from learner.metrics import METRICS_NAME, MetricsLog
from shared.evaluation.names import read_metrics
from shared.writes import RefusedWrites
from tests.support.launcher import EPOCH, HANG_GUARD_S, TRAINING, Launcher

REFUSED = r"\[MAIN\] (.+) not written \(OSError: \[Errno 28\] No space left on device"


@pytest.fixture
def small_disk(tmp_path):
    """A 32 MiB tmpfs: a real ENOSPC once it is full (needs root; skipped, saying so, where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()}); the unit tests below inject ENOSPC")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk) -> str:
    """Write a filler file until the disk refuses (ENOSPC); its path."""
    path = os.path.join(disk, "filler")
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return path


def test_a_run_whose_disk_fills_keeps_training_and_writes_again_when_there_is_room(small_disk):
    # no replay with the checkpoints: its swap frees the replaced one's 7 MB, room a full disk would not have
    # (tests/unit/test_saved_replay.py fills the disk under a replay save)
    args = ("--learner.checkpoint-every", "2", "--learner.replay-every", "0", "--env.frame-size", "42")
    launcher = Launcher(small_disk, *TRAINING, *args)
    try:
        launcher.wait_for(EPOCH, HANG_GUARD_S, count=3)
        filler = fill(small_disk)
        full = launcher.wait_for(REFUSED, HANG_GUARD_S)[0][0]
        # metrics rows, the weights-version record and checkpoints are refused while the epochs go on
        launcher.wait_for(EPOCH, HANG_GUARD_S, after=full, count=6)
        launcher.wait_for(r"\[MAIN\] checkpoint at epoch \d+ failed \(", HANG_GUARD_S, after=full)
        refused = {m[1] for _, m in launcher.matches(REFUSED, full)}
        assert "the weights version record" in refused, refused  # a new file: no room (a row may fit a page held)
        os.remove(filler)
        launcher.wait_for(r"\[MAIN\] checkpoint at epoch \d+ written after earlier failures", HANG_GUARD_S, after=full)
        launcher.proc.send_signal(signal.SIGTERM)
        out = launcher.wait_exit()
        assert launcher.proc.returncode == 0, out
        (run_dir,) = [d for d in small_disk.iterdir() if d.is_dir()]
        rows, note = read_metrics(str(run_dir / METRICS_NAME))  # whole rows only: none was cut short
        assert note == "" and rows
        epochs = [r["learner/updates"] for r in rows if "learner/updates" in r]
        assert epochs == sorted(epochs) and len(epochs) >= 3
        published = int((run_dir / "weights_version").read_text())
        versions = [int(m[1]) for _, m in launcher.matches(r"weights v(\d+), actor weights versions")]
        assert versions and published == versions[-1]  # the last broadcast is the one on record
    finally:
        launcher.kill()


def test_a_metrics_row_the_disk_cuts_short_is_taken_back_whole(tmp_path, monkeypatch):
    """ENOSPC injected at the OS call: a row written in part is cut back, said once, counted; later rows land whole."""
    said: list[str] = []
    log = MetricsLog(str(tmp_path), tensorboard=False, refused=RefusedWrites(said.append))
    log.write(1, 10, 0.5, {"learner/loss": 1.0})
    real_write = os.write

    def full(fd, data):
        real_write(fd, data[:7])  # what fitted
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    log.write(2, 20, 1.0, {"learner/loss": 2.0})
    log.write(3, 30, 1.5, {"learner/loss": 3.0})
    monkeypatch.setattr(os, "write", real_write)
    log.write(4, 40, 2.0, {"learner/loss": 4.0})
    log.close()
    lines = (tmp_path / METRICS_NAME).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 4]
    assert log.refused.counts == {"a metrics row": 2} and len(said) == 1 and "a metrics row not written" in said[0]


def test_refused_writes_are_counted_by_kind_and_said_once_per_hundred():
    said: list[str] = []
    refused = RefusedWrites(said.append)

    def enospc():
        raise OSError(errno.ENOSPC, "No space left on device")

    assert not any(refused.attempt("best.pt", enospc) for _ in range(250))
    assert refused.attempt("best.pt", lambda: None)
    assert refused.counts["best.pt"] == 250 and len(said) == 3  # the 1st, 100th and 200th
    assert said[1].endswith("100 refused so far); the run goes on")
