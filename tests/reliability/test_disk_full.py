"""A full disk costs a run records, not the run: every writer of the learner says what the disk refused at a steady
rate (shared/writes.py), training goes on, the weights still reach the actors (their version record and the liveness
file are overwritten in place), what failed is written again once there is room, and a final evaluation whose results
the disk refuses says so and exits 5."""

import errno
import json
import os
import re
import signal
import subprocess
import time

import pytest

from launch.exits import EXIT_UNWRITTEN
from launch.final_eval import main as final_eval
from launch.health import check, read_liveness
from learner.checkpoint import PUBLISHED_NAME, PUBLISHED_WIDTH, read_published, record_published
from learner.loop import Learner
from learner.metrics import METRICS_NAME, MetricsLog
from shared.evaluation.names import read_metrics
from shared.heartbeat import HEALTH_FILE_ENV, WIDTH
from shared.resolution import resolve_run
from shared.writes import SAY_EVERY_S, InPlaceRecord, RefusedWrites, read_record, write_atomic
from tests.integration.test_eval_rows import make_run
from tests.support.launcher import EPOCH, HANG_GUARD_S, TRAINING, Launcher
from tests.support.runs import small_config

ENOSPC = r"\(OSError: \[Errno 28\] No space left on device"
# RefusedWrites' lines for a full disk (a metrics row cut short says "[Errno 28] metrics row written in part")
REFUSED = r"\[MAIN\] (.+) not written \(OSError: \[Errno 28\] .*refused so far\); the run goes on"
WEIGHTS = r"\[MAIN\] Epoch \d+ .*Weights: v(\d+) \(max lag (-?\d+)"


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


def enospc(*_args) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def wait_for_weights_to_rise(launcher: Launcher, after: float, by: int = 3) -> list[tuple[int, int]]:
    """Wait until the epoch lines since ``after`` show the learner's weights version up ``by`` and the oldest version an
    actor plays (the version less the largest lag) up too; (version, oldest played) per epoch line."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        seen = [(int(m[1]), int(m[1]) - int(m[2])) for _, m in launcher.matches(WEIGHTS, after)]
        if len(seen) >= 2 and seen[-1][0] >= seen[0][0] + by and seen[-1][1] > seen[0][1]:
            return seen
        assert launcher.proc.poll() is None, f"launcher exited ({launcher.proc.returncode}):\n{launcher.output}"
        time.sleep(0.2)
    raise AssertionError(f"the weights did not rise by {by} versions at the actors within {HANG_GUARD_S}s:\n{launcher.output}")


def wait_for_beat_after(path: str, moment: float) -> dict:
    """The liveness file's record once it was written after ``moment`` (time.time()); fails after a hang guard."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        info = read_liveness(path)
        if info["time"] > moment:
            return info
        time.sleep(0.2)
    raise AssertionError(f"{path} not written since {moment}: {read_record(path)!r}")


def test_a_run_whose_disk_fills_keeps_training_and_broadcasting_and_writes_again_when_there_is_room(small_disk, monkeypatch):
    health = str(small_disk / "health.json")
    monkeypatch.setenv(HEALTH_FILE_ENV, health)  # the learner's liveness file, made at its start on the small disk
    # no replay with the checkpoints: its swap frees the replaced one's 7 MB, room a full disk would not have
    # (tests/unit/test_saved_replay.py fills the disk under a replay save)
    args = ("--learner.checkpoint-every", "2", "--learner.replay-every", "0", "--env.frame-size", "42")
    launcher = Launcher(small_disk, *TRAINING, *args)
    try:
        launcher.wait_for(EPOCH, HANG_GUARD_S, count=3)
        filler = fill(small_disk)
        filled = time.time()
        full = launcher.wait_for(REFUSED, HANG_GUARD_S)[0][0]
        # the weights still reach the actors: the broadcast goes out with its record written in place
        wait_for_weights_to_rise(launcher, after=full)
        launcher.wait_for(r"\[MAIN\] checkpoint at epoch \d+ failed \(", HANG_GUARD_S, after=full)
        launcher.wait_for(r"\[MAIN\] a metrics row not written \(OSError: \[Errno 28\] ", HANG_GUARD_S, after=full)
        beat = wait_for_beat_after(health, filled)  # liveness is written in place too, from the learner's own thread
        assert beat["role"] == "learner" and beat["phase"] == "training" and beat["ports"], beat
        assert check(health, max_age=60) == ""
        refused = {m[1] for _, m in launcher.matches(REFUSED, full)}
        assert "the weights version record" not in refused, refused
        assert not launcher.matches(r"\[HEALTH\] .* not written"), launcher.output
        os.remove(filler)
        freed = time.monotonic()
        # said at a steady rate: each kind's first refusal, then at most once per SAY_EVERY_S (a metrics row is
        # refused at every epoch); each said kind is said once more when written again (TensorBoard is opened again
        # a minute after its refusal: not waited for)
        for kind in refused:
            lines = [t for t, m in launcher.matches(REFUSED, full) if m[1] == kind and t <= freed]
            assert len(lines) <= 2 + (freed - full) / SAY_EVERY_S, (kind, launcher.output)
        for kind in refused - {"TensorBoard"}:
            launcher.wait_for(rf"\[MAIN\] {re.escape(kind)} written again after \d+ refused", HANG_GUARD_S, after=full)
        launcher.wait_for(r"\[MAIN\] checkpoint at epoch \d+ written after \d+ failed", HANG_GUARD_S, after=full)
        launcher.proc.send_signal(signal.SIGTERM)
        out = launcher.wait_exit()
        assert launcher.proc.returncode == 0, out
        (run_dir,) = [d for d in small_disk.iterdir() if d.is_dir()]
        rows, note = read_metrics(str(run_dir / METRICS_NAME))  # whole rows only: none was cut short
        assert note == "" and rows
        epochs = [r["learner/updates"] for r in rows if "learner/updates" in r]
        assert epochs == sorted(epochs) and len(epochs) >= 3
        published = read_published(str(run_dir))
        versions = [int(m[1]) for _, m in launcher.matches(r"weights v(\d+), actor weights versions")]
        assert versions and published == versions[-1]  # the last broadcast is the one on record
        assert os.path.getsize(run_dir / PUBLISHED_NAME) == PUBLISHED_WIDTH
    finally:
        launcher.kill()


def test_a_final_evaluation_on_a_full_disk_says_what_it_could_not_write_and_exits_5(small_disk, capsys):
    run = small_disk / "run"
    make_run(run)  # a Catch run folder, made while there is room
    fill(small_disk)
    assert final_eval([str(run), "--processes", "1"]) == EXIT_UNWRITTEN
    out, err = capsys.readouterr()
    assert re.search(r"\[FINAL\] eval_final.json not written " + ENOSPC, out), out
    assert "[FINAL] last (v9, 900 env steps): " in out and "eval_final.json not written (see above)" in out, out
    assert "error: the final evaluation could not write eval_final.json" in err and "(see above; exit 5)" in err, err
    assert not (run / "eval_final.json").exists() and not (run / "eval_final.json.tmp").exists()


def test_a_final_evaluation_whose_writes_are_refused_goes_on_and_exits_5(tmp_path, monkeypatch, capsys):
    """ENOSPC injected at the result's and the metrics row's writes, where no small disk can be mounted."""
    run = tmp_path / "run"
    make_run(run)
    monkeypatch.setattr("launch.final_eval.write_atomic", enospc)
    monkeypatch.setattr(MetricsLog, "_append", enospc)
    assert final_eval([str(run), "--processes", "1"]) == EXIT_UNWRITTEN
    out, err = capsys.readouterr()
    assert re.search(r"\[FINAL\] eval_final.json not written " + ENOSPC + r"; 1 refused so far\); the evaluation goes on", out)
    assert re.search(r"\[FINAL\] a metrics row not written " + ENOSPC, out), out
    assert "[FINAL] last hazards: " in out and "eval_final.json not written (see above)" in out, out  # the figures said
    assert "could not write eval_final.json, a metrics row (see above; exit 5)" in err, err
    assert f"python -m launch.final_eval {run} writes them once there is room" in err
    assert not (run / "eval_final.json").exists()


def test_a_version_record_the_disk_refuses_holds_no_broadcast_back_and_a_lost_one_is_jumped(tmp_path):
    cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
    cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch = False, False, 16
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path))
    said: list[str] = []
    learner.echo = said.append
    try:
        (tmp_path / PUBLISHED_NAME).mkdir()  # the record's path taken by a folder: even an in-place write fails
        learner._publish(3)
        current = learner.current_weights()
        assert current is not None and current[0] == 3 and learner.plane.consolidator.weights_version == 3
        assert said[0].startswith("[MAIN] the weights version record not written (IsADirectoryError"), said
        # an actor plays v7 of this run: published before a crash, never recorded; the next broadcast goes above it
        learner.counters.weights_version = 3
        track = learner.plane.consolidator.tracks[0]
        track.stats, track.weights_version, track.run = {"batches": 1}, 7, learner.counters.run
        assert learner._next_version() == 8
        assert said[-1].startswith("[MAIN] actors play weights v7 of this run, above v3: "), said
        track.run = learner.counters.run + 1  # another run's version numbers say nothing about this run's
        assert learner._next_version() == 4
    finally:
        learner.close()


def test_an_in_place_record_round_trips_padded_and_reads_an_older_releases_file(tmp_path):
    run_dir, path = str(tmp_path), tmp_path / PUBLISHED_NAME
    assert read_published(run_dir) == -1  # none yet
    path.write_text("123\n")  # as releases before in-place records wrote it
    assert read_published(run_dir) == 123
    record_published(run_dir, 124)
    assert path.read_text() == "124\n".ljust(PUBLISHED_WIDTH) and read_published(run_dir) == 124
    path.write_text("12x")
    assert read_published(run_dir) == -1  # not a number
    record = InPlaceRecord(str(tmp_path / "record"), 16)
    record.write('{"a": 1}')
    assert os.path.getsize(record.path) == 16 and read_record(record.path) == '{"a": 1}'
    record.write("x" * 40)  # a longer record grows the file ...
    assert os.path.getsize(record.path) == 40 and record.width == 40
    InPlaceRecord(record.path, 8).write("y")  # ... and a shorter one, by any writer, leaves no tail behind
    assert os.path.getsize(record.path) == 40 and read_record(record.path) == "y"
    with pytest.raises(ValueError, match="width=0 must be >= 1"):
        InPlaceRecord(record.path, 0)


def test_an_in_place_record_the_disk_refuses_raises_and_leaves_the_last_one(tmp_path, monkeypatch):
    record_published(str(tmp_path), 5)
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: enospc())
    with pytest.raises(OSError, match="No space left on device"):
        record_published(str(tmp_path), 6)
    assert read_published(str(tmp_path)) == 5
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real_pwrite(fd, data[:3], offset))  # a file cut short
    with pytest.raises(OSError, match="3 of 40 bytes"):
        InPlaceRecord(str(tmp_path / "new"), 40).write("x")


def test_an_in_place_record_is_rewritten_on_a_full_disk_that_refuses_a_new_file(small_disk):
    run_dir, health = str(small_disk), str(small_disk / "health.json")
    record_published(run_dir, 1)  # both made while there is room
    liveness = InPlaceRecord(health, WIDTH)
    liveness.write(json.dumps({"time": 1}))
    fill(small_disk)
    with pytest.raises(OSError) as refused:
        write_atomic(str(small_disk / "new.json"), "x" * 100_000)
    assert refused.value.errno == errno.ENOSPC and not os.path.exists(small_disk / "new.json.tmp")
    for version in range(2, 50):
        record_published(run_dir, version)
        liveness.write(json.dumps({"time": version}))
    assert read_published(run_dir) == 49 and json.loads(read_record(health)) == {"time": 49}


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
    assert log.refused.counts == {"a metrics row": 2} and len(said) == 2 and "a metrics row not written" in said[0]
    assert said[1] == "[MAIN] a metrics row written again after 2 refused"


def test_refused_writes_are_said_at_a_steady_rate_by_kind_and_once_written_again():
    said: list[str] = []
    now = [0.0]
    refused = RefusedWrites(said.append, clock=lambda: now[0])
    for second in range(250):  # refused once a second for 250 s
        now[0] = float(second)
        assert not refused.attempt("best.pt", enospc)
    assert refused.counts["best.pt"] == 250 and len(said) == 5  # at 0, 60, 120, 180 and 240 s
    assert said[0] == (
        "[MAIN] best.pt not written (OSError: [Errno 28] No space left on device; 1 refused so far); the run goes on"
    )
    assert said[1].endswith("61 refused so far); the run goes on") and said[4].endswith("241 refused so far); the run goes on")
    assert refused.attempt("best.pt", lambda: None) and said[5] == "[MAIN] best.pt written again after 250 refused"
    assert refused.attempt("best.pt", lambda: None) and len(said) == 6  # said once
    now[0] = 250.0  # refused and written by turns within a minute of the last line: counted, not said
    assert not refused.attempt("best.pt", enospc) and refused.attempt("best.pt", lambda: None) and len(said) == 6
    now[0] = 300.0  # a minute after it: said, and so is the write after it
    assert not refused.attempt("best.pt", enospc) and refused.attempt("best.pt", lambda: None)
    assert said[6].endswith("252 refused so far); the run goes on") and said[7] == "[MAIN] best.pt written again after 1 refused"
    assert not refused.attempt("a metrics row", enospc)  # each kind on its own clock
    assert said[8].startswith("[MAIN] a metrics row not written (") and refused.counts == {"best.pt": 252, "a metrics row": 1}
    tagged = RefusedWrites(said.append, "[FINAL]", "the evaluation goes on")
    assert not tagged.attempt("eval_final.json", enospc)
    assert said[-1].startswith("[FINAL] eval_final.json not written (") and said[-1].endswith("); the evaluation goes on")
