"""Actors on other hosts over real links, without Docker: network namespaces joined by veth pairs.

Three "hosts" (network namespaces): the learner (``launch.learner``, binding every interface, so
CURVE is on) and two actor hosts (``launch.actor --learner IP:PORT``, each leasing a slot), each
actor host joined to the learner's by its own veth pair. After training has run a while, actor
host 1's link goes down for 20 s and comes back: its actor reconnects by itself and its data flows
again within 10 s, the other host never stops, the learner's accounting shows no batch accepted
twice and counts the gap. Skips, saying why, only where namespaces cannot be made (not root, no
``ip netns``).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.launcher import SMALL_LEARNER
from tests.support.paths import ROOT as ROOT_DIR
from tests.support.runs import free_base_port

ROOT = Path(ROOT_DIR)
CUT_SECONDS = 20.0
PROCESSOR = re.compile(r"\[PROCESSOR\] Processed: [\d,]+, .* Per actor: \[(\d+), (\d+)\]")


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


class Hosts:
    """Namespaces L (learner), A1 and A2, with veth pairs L<->A1 (10.77.1.0/24) and L<->A2 (10.77.2.0/24)."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.names = {h: f"wp{tag}{h}" for h in ("l", "a1", "a2")}
        self.made: list[str] = []

    def make(self) -> str:
        """'' on success, else why namespaces cannot be made here."""
        if os.geteuid() != 0:
            return "needs root to make network namespaces"
        if shutil.which("ip") is None:
            return "no 'ip' command (iproute2)"
        for name in self.names.values():
            out = ip("netns", "add", name)
            if out.returncode:
                return f"'ip netns add' failed: {out.stderr.strip()}"
            self.made.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        learner = self.names["l"]
        for i, host in ((1, "a1"), (2, "a2")):
            inside, outside = f"wp{i}a{os.getpid() % 10000}", f"wp{i}l{os.getpid() % 10000}"
            steps = [
                ("link", "add", outside, "netns", learner, "type", "veth", "peer", "name", inside, "netns", self.names[host]),
                ("-n", learner, "addr", "add", f"10.77.{i}.1/24", "dev", outside),
                ("-n", self.names[host], "addr", "add", f"10.77.{i}.2/24", "dev", inside),
                ("-n", learner, "link", "set", outside, "up"),
                ("-n", self.names[host], "link", "set", inside, "up"),
            ]
            for step in steps:
                out = ip(*step)
                if out.returncode:
                    return f"'ip {' '.join(step)}' failed: {out.stderr.strip()}"
            setattr(self, f"dev_{host}", inside)
        return ""

    def run(self, host: str, args: list[str], log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.names[host], sys.executable, "-m", *args],
            cwd=ROOT,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
        )

    def link(self, host: str, state: str) -> None:
        out = ip("-n", self.names[host], "link", "set", getattr(self, f"dev_{host}"), state)
        assert out.returncode == 0, out.stderr

    def remove(self) -> None:
        for name in self.made:
            ip("netns", "del", name)


def samples(log: Path) -> list[tuple[int, int]]:
    return [(int(m[1]), int(m[2])) for m in PROCESSOR.finditer(log.read_text())]


def test_actor_host_link_cut_for_20s_reconnects_by_itself_and_nothing_is_accepted_twice(tmp_path):
    hosts = Hosts()
    why = hosts.make()
    if why:
        hosts.remove()
        pytest.skip(why)
    keys = tmp_path / "keys"
    for args in (
        ["launch.keys", str(keys), "--name", "learner"],
        ["launch.keys", str(keys), "--name", "actor", "--authorize", str(keys / "allowed")],
    ):
        subprocess.run([sys.executable, "-m", *args], cwd=ROOT, check=True, capture_output=True, timeout=60)
    port = free_base_port(4) + 2
    common = [
        "--env.name",
        "fake",
        "--env.frame-size",
        "36",
        "--actor.batch-steps",
        "16",
        "--transport.heartbeat-interval",
        "1",
        "--transport.heartbeat-timeout",
        "4",
        "--learner.no-exact-ratio",
    ]  # actors drop during the cut (holding the ratio, they would wait)
    learner_args = [
        "launch.learner",
        "--actors",
        "2",
        "--run-dir",
        str(tmp_path / "runs"),
        "--no-progress",
        "--log-every",
        "1",
        "--transport.host",
        "0.0.0.0",
        "--transport.base-port",
        str(port),
        "--transport.curve-server-secret",
        str(keys / "learner.key_secret"),
        "--transport.curve-authorized-dir",
        str(keys / "allowed"),
        *SMALL_LEARNER,
        "--replay.capacity",
        "8192",
        "--eval.every-env-steps",
        "0",
        *common,
    ]
    logs = {h: tmp_path / f"{h}.log" for h in ("l", "a1", "a2")}
    procs = {"l": hosts.run("l", learner_args, logs["l"])}
    for i, host in ((1, "a1"), (2, "a2")):
        procs[host] = hosts.run(
            host,
            [
                "launch.actor",
                "--learner",
                f"10.77.{i}.1:{port}",
                "--transport.curve-client-secret",
                str(keys / "actor.key_secret"),
                "--transport.curve-server-public",
                str(keys / "learner.key"),
                *common,
            ],
            logs[host],
        )
    timeline: list[tuple[float, int, int]] = []  # (time, host 1's, host 2's accepted transitions)

    def sample_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert procs["l"].poll() is None, logs["l"].read_text()
            got = samples(logs["l"])
            if got and (not timeline or got[-1] != timeline[-1][1:]):
                timeline.append((time.monotonic(), *got[-1]))
            time.sleep(0.1)

    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and (not timeline or min(timeline[-1][1:]) < 500):
            sample_for(0.5)
        assert timeline and min(timeline[-1][1:]) >= 500, "both actor hosts landing data"
        sample_for(6)
        slot1 = 0 if "[ACTOR] slot 0 of 2" in logs["a1"].read_text() else 1  # the slot host 1's actor leased
        cut_at = time.monotonic()
        hosts.link("a1", "down")
        sample_for(CUT_SECONDS)
        up_at = time.monotonic()
        hosts.link("a1", "up")
        at_up = timeline[-1][1 + slot1]
        sample_for(10)
        procs["l"].send_signal(signal.SIGTERM)  # final checkpoint and the accounting line, exit 0
        assert procs["l"].wait(timeout=120) == 0, logs["l"].read_text()
        for host in ("a1", "a2"):
            procs[host].send_signal(signal.SIGTERM)
        codes = [procs[h].wait(timeout=60) for h in ("a1", "a2")]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        hosts.remove()

    def rate(slot: int, start: float, end: float) -> float:
        inside = [s for s in timeline if start <= s[0] <= end]
        return (inside[-1][1 + slot] - inside[0][1 + slot]) / max(inside[-1][0] - inside[0][0], 1e-9)

    slot2 = 1 - slot1
    # "during" leaves out the first 5 s: what host 1 had queued before the cut may still land then
    windows = {"before": (cut_at - 6, cut_at), "during": (cut_at + 5, up_at), "after": (up_at, up_at + 10)}
    rates = {name: (rate(slot1, *w), rate(slot2, *w)) for name, w in windows.items()}
    back = next(t for t, *counts in timeline if t >= up_at and counts[slot1] > at_up)
    out = logs["l"].read_text()
    accounting = re.search(r"\[MAIN\] accounting: .*", out)[0]
    print(
        "\ntransitions/s (host 1, host 2): "
        + ", ".join(f"{k} {a:.0f}, {b:.0f}" for k, (a, b) in rates.items())
        + f"; host 1 data again {back - up_at:.1f}s after its link came back\n{accounting}"
    )
    assert rates["before"][0] > 0 and rates["before"][1] > 0
    assert rates["during"][0] == 0  # the cut is real
    assert rates["during"][1] > 0 and rates["after"][1] > 0  # the other host never stopped
    assert rates["after"][0] > 0 and back - up_at <= 10.0  # reconnected by itself, within 10 s
    m = re.search(r"accepted (\d+), rejected (\d+), duplicates (\d+), gaps (\d+)", accounting)
    assert int(m[3]) == 0  # nothing accepted twice
    assert int(m[4]) > 0  # the cut's dropped batches: counted as gaps
    assert codes == [0, 0]
