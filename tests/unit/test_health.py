"""The liveness file and its check (shared/heartbeat.py, launch/health.py): a padded record overwritten in place, the
learner's written from a thread of its own whatever its main thread does, the ports checked those of its phase, and
a read that met a write half done tried again once."""

import contextlib
import json
import re
import socket
import time

import launch.health
import shared.heartbeat
from launch.health import check, read_liveness
from shared.heartbeat import HEALTH_FILE_ENV, WIDTH, Heartbeat


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_check_reads_a_padded_record_and_checks_the_ports_of_its_phase(tmp_path):
    path = str(tmp_path / "health.json")
    beat = Heartbeat("learner", "127.0.0.1", phase="training", path=path)
    beat.write()
    text = (tmp_path / "health.json").read_text()
    assert len(text) == WIDTH and text.endswith(" ") and json.loads(text)["phase"] == "training"
    assert check(path, max_age=60) == ""
    port = closed_port()
    beat.update("training", [port])
    assert check(path, max_age=60).startswith(f"the learner (training)'s port 127.0.0.1:{port} refuses connections")
    beat.update("final evaluation")  # the sockets closed: no ports to check
    info = read_liveness(path)
    assert info["phase"] == "final evaluation" and info["ports"] == [] and check(path, max_age=60) == ""
    assert len((tmp_path / "health.json").read_text()) == WIDTH  # rewritten in place, no tail of a longer record
    info["time"] -= 120
    (tmp_path / "health.json").write_text(json.dumps(info))  # written whole, unpadded: as older releases did
    assert re.match(r"the learner \(final evaluation\) last reported 12\ds ago \(allowed 60s\)", check(path, max_age=60))


def test_a_record_read_half_written_is_read_again_once(tmp_path, monkeypatch):
    path = str(tmp_path / "health.json")
    Heartbeat("actor", path=path).write()
    whole = (tmp_path / "health.json").read_text().strip()
    reads = iter([whole[:20], whole])
    monkeypatch.setattr(launch.health, "read_record", lambda _: next(reads))
    assert check(path, max_age=60) == ""
    reads = iter([whole[:20], whole[:30]])  # torn twice: said, not passed
    assert check(path, max_age=60).startswith(f"no readable liveness file {path!r}")


def test_the_learners_heartbeat_beats_from_its_own_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(shared.heartbeat, "EVERY", 0.05)
    path = str(tmp_path / "health.json")
    beat = Heartbeat("learner", phase="starting", path=path).start()
    times = set()
    try:
        deadline = time.monotonic() + 60
        while len(times) < 3 and time.monotonic() < deadline:  # three writes with no call from here
            with contextlib.suppress(OSError, ValueError):  # not made yet
                times.add(read_liveness(path)["time"])
            time.sleep(0.02)
    finally:
        beat.stop()
    assert len(times) >= 3 and beat._thread is not None and not beat._thread.is_alive()


def test_the_file_is_the_one_the_environment_names_and_none_when_empty(tmp_path, monkeypatch):
    monkeypatch.setenv(HEALTH_FILE_ENV, str(tmp_path / "named.json"))
    Heartbeat("actor").write()
    assert read_liveness(str(tmp_path / "named.json"))["role"] == "actor"
    Heartbeat("actor", path="").start().write()  # a launcher's actor: writes nothing, starts no thread
    assert sorted(p.name for p in tmp_path.iterdir()) == ["named.json"]
