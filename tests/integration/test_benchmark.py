"""launch.benchmark end to end at a tiny size: every stage runs, the JSON has every documented key with numbers."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.runs import free_base_port

SYSTEM_KEYS = {
    "experiences_per_s",
    "batches_per_s",
    "samples_per_s",
    "effective_batch",
    "updates",
    "epochs",
    "epoch_seconds",
    "first_epoch_ratio",
    "gpu_utilization",
    "collector_blocked_fraction",
    "collector_lock_wait_seconds",
    "collector_handoff_ms_per_1k_transitions",
    "collector_handoffs",
    "collector_sent_transitions",
    "drops",
    "replay_bytes_per_transition",
    "learner_rss_mb_start",
    "learner_rss_mb_end",
    "actors_rss_mb_start",
    "actors_rss_mb_end",
    "compile_seconds",
    "seconds",
}
LEARNER_VARIANTS = [f"{name}_accum{a}" for name in ("fp32_eager", "amp_eager", "amp_compiled") for a in (1, 4)]
GPU_ONLY = {"gpu_utilization"}  # null on a machine without CUDA, a number with it


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.slow  # minutes: scheduled first (tests/conftest.py)
def test_benchmark_json_has_every_key_with_numbers(tmp_path):
    out = tmp_path / "bench.json"
    base = free_base_port(6) + 2
    cmd = [
        sys.executable,
        "-m",
        "launch.benchmark",
        "--quick",
        "--actors",
        "2",
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--transport-seconds",
        "1",
        "--learner-updates",
        "2",
        "--learner-epochs",
        "2",
        "--system-seconds",
        "1",
        "--system-min-epochs",
        "2",
        "--system-min-replay",
        "256",
        "--system-updates-per-epoch",
        "1",
        "--optimized-micro-batch",
        "16",
        "--optimized-accum",
        "2",
        "--original.batch",
        "16",
        "--run.env.name",
        "fake",
        "--run.actor.batch-steps",
        "16",
        "--run.learner.micro-batch",
        "16",
        "--run.replay.capacity",
        "8192",
        "--run.transport.base-port",
        str(base),
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())

    assert set(result) == {"machine", "env_ceiling", "collection", "transport", "replay", "learner", "system"}
    machine = result["machine"]
    for key in ("cpu", "cores", "memory_gb", "torch", "python", "packages", "date", "benchmark_seconds"):
        assert machine[key] is not None, key
    assert machine["packages"]["torch"] and machine["packages"]["pyzmq"] and machine["packages"]["msgpack"]

    assert is_number(result["env_ceiling"]["steps_per_s"]) and result["env_ceiling"]["steps_per_s"] > 0
    collection = result["collection"]
    for key in (
        "transitions_per_s_random",
        "transitions_per_s_apex",
        "efficiency_random",
        "efficiency_apex",
        "cpu_efficiency_random",
        "cpu_efficiency_apex",
    ):
        assert is_number(collection[key]) and collection[key] > 0, key
    for r in collection["rounds_random"] + collection["rounds_apex"]:  # rates from message to message
        assert len(r["messages"]) == 2 and min(r["messages"]) >= 3 and r["seconds"] >= 1, r
        assert 0 < r["actor_env_share"] < 1, r  # each actor's time inside its envs' step, over its loop's time
    assert 0 < collection["actor_env_share_random"] < 1 and 0 < collection["actor_env_share_apex"] < 1
    assert result["transport"]["transitions_per_s"] > 0 and result["transport"]["rejected"] == 0
    assert result["replay"]["bytes_per_transition"] < result["replay"]["naive_uint8_stacked_bytes"]
    learner = result["learner"]
    for variant in LEARNER_VARIANTS:
        figures = learner[variant]
        assert all(is_number(figures[k]) for k in ("updates_per_s", "samples_per_s", "first_epoch_ratio")), variant
        assert figures["effective_batch"] == 16 * (4 if variant.endswith("4") else 1)
    assert learner["amp_compiled_accum1"]["compile_seconds"] > 0
    for kind in ("run_prioritized", "run_uniform"):  # the learner as a run sets it, on both replays
        assert learner[kind]["updates_per_s"] > 0 and learner[kind]["effective_batch"] == 16, kind
    split = learner["split"]
    parts = ("sample", "loss", "backward", "priorities", "step_and_rest")
    assert all(is_number(split[k]) and split[k] >= 0 for k in (*parts, "targets", "bn_stats", "total")), split
    assert split["priorities"] > 0  # prioritized: a write-back was timed (no comparison of two timings: not a test)

    system = result["system"]
    assert system["original_settings"]["batch"] == 16 and system["optimized_settings"]["accum_steps"] == 2
    for side in ("original", "optimized"):
        figures = system[side]
        assert set(figures) == SYSTEM_KEYS, side
        for key in SYSTEM_KEYS - GPU_ONLY:
            assert is_number(figures[key]), (side, key, figures[key])
        assert figures["updates"] >= 2 and figures["experiences_per_s"] > 0, (side, figures)
        assert figures["collector_handoffs"] > 0
    assert system["original"]["effective_batch"] == 16 and system["optimized"]["effective_batch"] == 32

    def handoffs_per_transition(side):
        return system[side]["collector_handoffs"] / system[side]["collector_sent_transitions"]

    assert handoffs_per_transition("original") > handoffs_per_transition("optimized")  # one-step chunks vs batches
    if machine["gpu"] is None:  # with a GPU it is a number when NVML is installed, else null
        assert system["original"]["gpu_utilization"] is None and system["optimized"]["gpu_utilization"] is None

    table = proc.stdout
    for row in ("| Experience Rate |", "| Training Throughput |", "| GPU Utilization |", "| Lock Wait Time", "| Epoch Time |"):
        assert row in table, row


def test_benchmark_doc_documents_every_system_key():
    with open(os.path.join(ROOT, "docs", "benchmark.md")) as fh:
        doc = fh.read()
    for key in SYSTEM_KEYS | {"machine", "env_ceiling", "collection", "transport", "replay", "learner", "system"}:
        assert key in doc, key


def test_a_sigkilled_benchmark_leaves_no_sender_running(tmp_path):
    """The transport stage's synthetic senders stop by themselves once the benchmark process is gone."""
    import signal
    import time

    import psutil

    base = free_base_port(4) + 2
    cmd = [
        sys.executable,
        "-m",
        "launch.benchmark",
        "--stages",
        "transport",
        "--transport-seconds",
        "60",
        "--transport-senders",
        "2",
        "--run.transport.base-port",
        str(base),
        "--json",
        str(tmp_path / "b.json"),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, senders = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(senders) < 2:  # the two senders (the spawn tracker is not one)
            time.sleep(0.5)
            senders = [
                c for c in psutil.Process(proc.pid).children(recursive=True) if "multiprocessing-fork" in " ".join(c.cmdline())
            ]
        assert len(senders) == 2, [c.cmdline() for c in senders]
        time.sleep(2.0)  # well inside the 3 s warm-up + 60 s window: the senders are pushing
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(senders, timeout=10)
        assert not alive, [p.pid for p in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
