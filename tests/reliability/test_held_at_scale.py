"""Holding the replay ratio at scale (issue 84 item 7). Held, each actor's batch waits its turn behind every other
actor's, so its age in weights versions and the time between two reads of one connection grow with the actors. By
arithmetic, stale rejects begin near 35 learner-bound Mario actors and heartbeat and lease limits are crossed once a
read interval passes 30 s. Here the arithmetic is made to bite with 6 leasing fake-env actors and a spare on 2 cores:
a slow held learner (64 samples per transition), a broadcast every batch, a weights-lag limit of 1, ZMTP heartbeats
of 0.1 s / 0.3 s and leases of 1 s. Once every slot has delivered, the spare asks for one every second. Nothing is
refused as stale, no link is dropped (no seq gap, nothing lost in flight), every lease holds (the spare never gets a
slot) and the budget is reached. (At start-up a claim lapses when its first batch takes over the 1 s lease to land,
and two actors may race for it: those refusals, `slot_owned`, come before every slot has delivered.)"""

import re
import signal
import subprocess
import sys
import threading
import time

from tests.support.launcher import HANG_GUARD_S, SMALL_LEARNER
from tests.support.paths import ROOT
from tests.support.runs import free_base_port

ACTORS = 6
SHARED = (  # the learner's and the actors' (launch.actor takes launch.local's flags, which must match)
    *("--actors", str(ACTORS), "--env.name", "fake", "--actor.batch-steps", "16", "--learner.exact-ratio"),
    *("--transport.heartbeat-interval", "0.1", "--transport.heartbeat-timeout", "0.3", "--transport.slot-lease", "1"),
)


def test_many_leasing_actors_behind_a_held_learner_lose_nothing_to_age_heartbeats_or_leases(tmp_path):
    base = free_base_port(ACTORS + 2) + 2
    learner_cmd = [sys.executable, "-m", "launch.local", "--no-spawn-actors", "--no-progress", *SHARED, *SMALL_LEARNER]
    learner_cmd += ["--transport.base-port", str(base), "--run-dir", str(tmp_path / "runs"), "--log-every", "1"]
    learner_cmd += ["--learner.samples-per-insert", "64", "--learner.broadcast-env-steps", "16"]
    learner_cmd += ["--learner.max-weights-lag", "1", "--total-env-steps", "900", "--eval.every-env-steps", "0"]
    learner_cmd += ["--eval.final-episodes", "0"]
    learner = subprocess.Popen(learner_cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(learner.stdout), daemon=True)
    reader.start()
    actor_cmd = [sys.executable, "-m", "launch.actor", "--learner", f"127.0.0.1:{base}", *SHARED]
    logs = [open(tmp_path / f"actor-{i}.log", "w") for i in range(ACTORS + 1)]  # the last one is the spare
    actors = [subprocess.Popen(actor_cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True) for log in logs[:-1]]
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not any(_every_slot_delivered(line) for line in list(lines)) and learner.poll() is None:
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        # every slot held (claims turned to leases by data): the spare asks every second from now on
        actors.append(subprocess.Popen(actor_cmd, cwd=ROOT, stdout=logs[-1], stderr=subprocess.STDOUT, text=True))
        learner.wait(timeout=3 * HANG_GUARD_S)
        reader.join(timeout=30)
    finally:
        for proc in [learner, *actors]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in actors:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
    out = "".join(lines)
    assert learner.returncode == 0, out
    assert "env-step budget" in out, out
    (accounting,) = [line for line in out.splitlines() if line.startswith("[MAIN] accounting:")]
    assert f"{ACTORS} incarnation(s) on {ACTORS} slot(s)" in accounting, accounting  # nobody took a slot over
    assert re.search(r"rejected 0, duplicates 0, gaps 0; rejected by reason \{('slot_owned': \d+)?\}$", accounting), accounting
    lost = [int(m.group(1).replace(",", "")) for m in re.finditer(r"Lost in flight: ([\d,]+)", out)]
    assert lost and lost[-1] == 0, out
    texts = [(tmp_path / f"actor-{i}.log").read_text() for i in range(ACTORS + 1)]
    assert sum(re.search(r"\[ACTOR\] slot \d+ of", text) is not None for text in texts) == ACTORS, texts
    assert re.search(r"\[ACTOR\] slot \d+ of", texts[-1]) is None, texts[-1]  # the spare waited
    assert re.search(r"batches played more than \d+ weights versions ago are refused \(1 \+ \d+ the held pipeline", out), out


def _every_slot_delivered(line: str) -> bool:
    """A [PROCESSOR] line whose per-actor counts are all above 0."""
    m = re.search(r"Per actor: \[([\d, ]+)\]", line)
    return m is not None and len(counts := m.group(1).split(", ")) == ACTORS and all(int(c) > 0 for c in counts)
