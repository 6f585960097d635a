"""The learner is SIGKILLed and restarted with --resume while standalone actors keep running.

Each runs with the replay ratio capped and held (``--learner.exact-ratio``: actors wait at the socket rather than
drop). The learner runs alone (``launch.local --no-spawn-actors``); two actors run as their own programs
(``python -m launch.actor``), so they outlive it. After the kill the resumed learner continues from the
last complete checkpoint (epoch and updates equal to it, never below), publishes a weights version
above every version the killed one published (so above any an actor holds), and the same actor
processes, never restarted, reconnect by themselves, receive the new weights and keep delivering.
Also: actors spawned by launch.local exit on their own when the launcher is SIGKILLed.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from learner.checkpoint import load_checkpoint, read_published
from tests.support.launcher import SMALL_LEARNER, fake_run_cmd
from tests.support.paths import ROOT
from tests.support.runs import free_base_port


def start(args, log_path):
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log


def read(path):
    with open(path) as fh:
        return fh.read()


def wait_until(condition, timeout, what, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        for proc, log in procs:
            assert proc.poll() is None, f"{proc.args} exited ({proc.returncode}) before {what}:\n{read(log)}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


RATIO = {"capped": "--learner.no-exact-ratio", "held": "--learner.exact-ratio"}  # actors drop, or wait (held)
RATIOS = ["held", pytest.param("capped", marks=pytest.mark.extended)]  # held is the default; capped: make test-all


def stop(actors) -> list[int]:
    """SIGTERM each (process, log) in ``actors`` and return their exit codes: a clean stop, the report included."""
    for proc, _ in actors:
        proc.send_signal(signal.SIGTERM)
    return [proc.wait(timeout=30) for proc, _ in actors]


def kill_and_close(procs) -> None:
    """Whatever a test leaves running is killed, and every log closed."""
    for proc, log in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def actor_and_learner_args(ratio: str) -> list[str]:
    """What the learner and the two standalone actors share: env, ports, batch size and the ratio mode."""
    port = str(free_base_port(4) + 2)
    return ["--actors", "2", "--env.name", "fake", "--transport.base-port", port, "--actor.batch-steps", "16", RATIO[ratio]]


@pytest.mark.parametrize("ratio", RATIOS)
def test_sigkilled_learner_resumes_and_the_same_actors_reconnect(tmp_path, ratio):
    common = actor_and_learner_args(ratio)
    learner_args = [
        "launch.local",
        "--no-spawn-actors",
        "--no-progress",
        "--log-every",
        "1",
        "--run-dir",
        str(tmp_path / "runs"),
        *common,
        *SMALL_LEARNER,
        "--learner.broadcast-env-steps",
        "10",
        "--learner.checkpoint-every",
        "1",
        "--learner.replay-every",  # the resume starts from an empty replay: it trains only on the actors' new batches
        "0",
        "--replay.capacity",
        "4096",
        "--eval.final-episodes",
        "0",
    ]
    logs = {name: str(tmp_path / f"{name}.log") for name in ("learner", "resumed", "actor0", "actor1")}
    learner = start(learner_args, logs["learner"])
    actors = [start(["launch.actor", "--actor-id", str(i), *common], logs[f"actor{i}"]) for i in range(2)]
    resumed = None
    try:
        run_dir = wait_until(
            lambda: [str(p) for p in (tmp_path / "runs").glob("*") if (p / "checkpoint.pt").exists()],
            120,
            "the first checkpoint",
            procs=[(learner[0], logs["learner"])],
        )[0]
        wait_until(
            lambda: load_checkpoint(run_dir)["counters"]["weights_version"] >= 2,
            120,
            "a checkpoint with weights v2",
            procs=[(learner[0], logs["learner"])],
        )
        learner[0].send_signal(signal.SIGKILL)
        learner[0].wait(timeout=30)
        saved = load_checkpoint(run_dir)["counters"]
        published = read_published(run_dir)  # the newest version the killed learner handed out
        assert published >= saved["weights_version"] >= 2
        pids = [proc.pid for proc, _ in actors]
        assert all(proc.poll() is None for proc, _ in actors), "an actor died with the learner"
        time.sleep(1.0)  # the actors play on alone for a moment (staging, dropping and counting)

        target = saved["updates"] + 15  # three more epochs
        resumed = start(
            ["launch.local", "--resume", run_dir, "--no-spawn-actors", "--no-progress", "--learner.steps", str(target)],
            logs["resumed"],
        )
        resumed[0].wait(timeout=180)
        out = read(logs["resumed"])
        assert resumed[0].returncode == 0, out
        assert all(proc.poll() is None for proc, _ in actors), "an actor died while the learner was down"
        assert [proc.pid for proc, _ in actors] == pids
        codes = stop(actors)
    finally:
        kill_and_close([learner, *actors] + ([resumed] if resumed else []))
    assert codes == [0, 0], [read(logs[f"actor{i}"]) for i in range(2)]

    match = re.search(r"\[MAIN\] resumed at epoch (\d+), (\d+) updates, weights v(\d+)", out)
    assert match, out
    epoch, updates, version = map(int, match.groups())
    assert (epoch, updates) == (saved["epoch"], saved["updates"])  # from the last complete checkpoint
    assert version == max(saved["weights_version"], published) + 1 > published
    final = load_checkpoint(run_dir)["counters"]
    assert final["updates"] == target and final["epoch"] == saved["epoch"] + 3
    assert final["weights_version"] > version and final["inserted"] > saved["inserted"]  # broadcasts: env steps

    # the same actors (never restarted) took the new learner's weights and kept delivering
    versions = re.search(r"actor weights versions \[(\d+), (\d+)\]", out)
    assert versions and min(map(int, versions.groups())) >= version, out
    per_actor = re.findall(r"\[PROCESSOR\] Processed: .*Per actor: \[(\d+), (\d+)\]", out)
    assert per_actor and min(map(int, per_actor[-1])) > 0, out
    reports = [json.loads(read(logs[f"actor{i}"]).split("[ACTOR] ", 1)[1]) for i in range(2)]
    assert [r["actor"] for r in reports] == [0, 1]
    assert min(r["weights_version"] for r in reports) >= version

    # metrics.jsonl across both learner lives: the published version never goes back
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    published_versions = [int(row["learner/weights_version"]) for row in rows if "learner/weights_version" in row]
    probed_versions = [int(row["probe/weights_version"]) for row in rows if "probe/weights_version" in row]
    assert probed_versions == sorted(probed_versions) and len(probed_versions) > 1  # a probe row at every broadcast
    assert published_versions == sorted(published_versions)
    print(
        f"\ncheckpoint before the kill: epoch {saved['epoch']}, updates {saved['updates']}, weights "
        f"v{saved['weights_version']} (published v{published}); resumed at v{version}; final: epoch "
        f"{final['epoch']}, updates {final['updates']}, v{final['weights_version']}; actor versions "
        f"{[r['weights_version'] for r in reports]}, dropped {[r['dropped_batches'] for r in reports]}"
    )


@pytest.mark.parametrize("ratio", RATIOS)
def test_a_learner_that_starts_over_is_followed_at_once_by_the_same_actors(tmp_path, ratio):
    """The learner dies before its first checkpoint, so ``--resume latest`` starts a new run at weights v0 while
    the actors, never restarted, hold a higher version of the dead run. They take the new run's v0 at once (its
    broadcasts carry a new run identity), though the new run publishes nothing above v0."""
    common = actor_and_learner_args(ratio)
    learner_args = [
        "launch.local",
        "--no-spawn-actors",
        "--no-progress",
        "--log-every",
        "1",
        "--resume",
        "latest",
        "--run-dir",
        str(tmp_path / "runs"),
        *common,
        *SMALL_LEARNER,
        "--learner.checkpoint-every",
        "100000",
        "--learner.checkpoint-seconds",
        "0",
        "--replay.capacity",
        "4096",
        "--eval.final-episodes",
        "0",
    ]
    logs = {name: str(tmp_path / f"{name}.log") for name in ("learner", "restarted", "actor0", "actor1")}
    learner = start([*learner_args, "--learner.broadcast-env-steps", "10"], logs["learner"])
    actors = [start(["launch.actor", "--actor-id", str(i), *common], logs[f"actor{i}"]) for i in range(2)]
    restarted = None
    try:
        versions = r"\[MAIN\] Epoch \d+ .*Weights: v(\d+)"
        wait_until(
            lambda: [v for v in re.findall(versions, read(logs["learner"])) if int(v) >= 6],
            120,
            "weights v6 from the first learner",
            procs=[(learner[0], logs["learner"])],
        )
        learner[0].send_signal(signal.SIGKILL)
        learner[0].wait(timeout=30)
        (dead_run,) = (tmp_path / "runs").glob("*")
        assert not (dead_run / "checkpoint.pt").exists()  # died before its first checkpoint
        dead_version = read_published(str(dead_run))
        assert dead_version >= 6
        pids = [proc.pid for proc, _ in actors]

        # a new run that publishes v0 at its start and nothing after it; it runs until an epoch line says no actor
        # is on another run's weights any more (the actors' first batches there were played with the dead run's)
        restarted = start([*learner_args, "--learner.broadcast-env-steps", "1000000"], logs["restarted"])

        def followed():
            epochs = re.findall(r"\[MAIN\] Epoch \d+ .*", read(logs["restarted"]))
            return len(epochs) >= 2 and "on another run's weights" not in epochs[-1]

        wait_until(followed, 120, "both actors on the new run's weights", procs=[(restarted[0], logs["restarted"])])
        restarted[0].send_signal(signal.SIGTERM)  # a clean stop: accounting and the final line
        restarted[0].wait(timeout=120)
        out = read(logs["restarted"])
        assert restarted[0].returncode == 0, out
        assert [proc.pid for proc, _ in actors] == pids and all(proc.poll() is None for proc, _ in actors)
        codes = stop(actors)
    finally:
        kill_and_close([learner, *actors] + ([restarted] if restarted else []))
    assert codes == [0, 0], [read(logs[f"actor{i}"]) for i in range(2)]
    assert "--resume latest: no run with a checkpoint" in out, out
    lags = [int(v) for v in re.findall(r"Weights: v\d+ \(max lag (-?\d+)", out)]
    assert lags and min(lags) >= 0, out  # never a negative lag from the dead run's version numbers
    # both actors' latest batches were played with the new run's v0, below the dead run's version
    assert re.search(r"actor weights versions \[0, 0\] \(lag \[0, 0\]\)", out), out
    reports = [json.loads(read(logs[f"actor{i}"]).split("[ACTOR] ", 1)[1]) for i in range(2)]
    assert [r["weights_version"] for r in reports] == [0, 0]
    assert len({r["weights_run"] for r in reports}) == 1 and reports[0]["weights_run"] > 0
    print(
        f"\nthe dead run had published v{dead_version}; the new run's v0 reached both actors "
        f"(lags after the restart {sorted(set(lags))})"
    )


def test_actors_spawned_by_a_sigkilled_launcher_exit_by_themselves(tmp_path):
    base = free_base_port(4) + 2
    cmd = fake_run_cmd(tmp_path, base, "--collect-only")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    alive = []
    try:

        def actors():  # both actors connected to their experience sockets: they are in their loops
            found = [
                c
                for c in psutil.Process(proc.pid).children(recursive=True)
                if any(conn.raddr and conn.raddr.port in (base, base + 1) for conn in c.net_connections("tcp"))
            ]
            return found if len(found) == 2 else None

        children = wait_until(actors, 60, "two connected actor processes")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(children, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for child in alive:
            child.kill()
    assert len(gone) == 2 and not alive, f"orphaned actors still running: {alive}"
