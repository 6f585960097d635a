"""Version skew is loud: a batch of another protocol version names its slot and both versions at the learner; an
actor whose learner broadcasts another version exits non-zero saying so, and so does a leasing actor (the Compose
default), whose slot request the learner answers with a refusal naming both versions; a checkpoint this release's network cannot
load is named and exits 2 (``--resume RUN``) or is left beside a new run (``--resume latest``), never a crash loop."""

import json
import os
import subprocess
import sys
import time

import msgpack
import pytest
import torch
import zmq

from learner.data_plane import DataPlane
from learner.loop import Learner
from shared.envs import env_spec
from shared.network import build_q_network
from shared.resolution import resolve_run
from shared.wire import protocol
from tests.support.launcher import HANG_GUARD_S, TRAINING, run_fake
from tests.support.messages import valid_batch
from tests.support.paths import ROOT
from tests.support.runs import free_base_port, small_config


def other_version(parts: list[bytes]) -> list[bytes]:
    header = msgpack.unpackb(parts[0], raw=False) | {"v": protocol.VERSION + 1}
    return [msgpack.packb(header, use_bin_type=True), *parts[1:]]


def test_weights_of_another_protocol_version_are_refused_naming_both_versions():
    net = build_q_network(env_spec(small_config().env))
    state = {k: v.detach().numpy() if v.is_floating_point() else v.numpy().astype("int64") for k, v in net.state_dict().items()}
    parts = [bytes(memoryview(p)) for p in protocol.encode_weights(3, state, run=5)]
    expected = {k: (tuple(v.shape), v.dtype.str) for k, v in state.items()}
    with pytest.raises(protocol.ProtocolError, match=f"version: version {protocol.VERSION + 1}, expected {protocol.VERSION}"):
        protocol.decode_weights(other_version(parts), expected)
    with pytest.raises(protocol.ProtocolError, match="version"):  # whatever else changed with it
        protocol.decode_weights(other_version(parts)[:3], expected)


def test_the_learner_names_the_slot_of_a_batch_of_another_version(capfd):
    cfg = small_config(actors=2, envs=1, steps=16, capacity=4096)
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        push.connect(f"tcp://127.0.0.1:{cfg.transport.base_port + 1}")
        deadline = time.monotonic() + HANG_GUARD_S
        while plane.consolidator.rejects["version"] < 3 and time.monotonic() < deadline:
            push.send_multipart(other_version(valid_batch(cfg, actor=1)))
            time.sleep(0.05)
        assert plane.consolidator.rejects["version"] >= 3
    finally:
        push.close()
        plane.close()
    said = [line for line in capfd.readouterr().out.splitlines() if "speaks another protocol" in line]
    assert said == [
        f"[MAIN] actor slot 1 speaks another protocol (version: version {protocol.VERSION + 1}, expected "
        f"{protocol.VERSION}): its batches are refused"
    ]  # once per slot, however many come


def test_an_actor_whose_learner_broadcasts_another_version_exits_4(tmp_path):
    base = free_base_port(4) + 2
    cfg = small_config(actors=1, envs=1)
    net = build_q_network(env_spec(cfg.env))
    state = {k: v.detach().numpy() if v.is_floating_point() else v.numpy().astype("int64") for k, v in net.state_dict().items()}
    weights = other_version([bytes(memoryview(p)) for p in protocol.encode_weights(1, state, run=9)])
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(f"tcp://127.0.0.1:{base - 1}")
    cmd = [sys.executable, "-m", "launch.actor", "--actor-id", "0", "--actors", "1", "--env.name", "fake"]
    cmd += ["--transport.base-port", str(base), "--actor.weights-timeout", "0", "--actor.batch-steps", "16"]
    cmd += ["--learner.no-exact-ratio"]  # no learner reads its batches: drop them rather than wait
    actor = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while actor.poll() is None and time.monotonic() < deadline:  # a broadcast every 0.2 s until it gives up
            pub.send_multipart(weights)
            time.sleep(0.2)
        out, err = actor.communicate(timeout=60)
        assert actor.returncode == 4, out + err
        assert f"version {protocol.VERSION + 1}, expected {protocol.VERSION}" in err, err
    finally:
        if actor.poll() is None:
            actor.kill()
            actor.wait(timeout=10)
        pub.close()


def test_a_request_of_another_version_is_answered_with_both_versions():
    for request in (protocol.encode_slot_request(7, -1, 2), protocol.encode_weights_request(0, 7, -1)):
        assert protocol.request_version(request) is None  # this version's: decoded as usual
        assert protocol.request_version(other_version(request)) == protocol.VERSION + 1
    assert protocol.request_version([b"\x00garbage"]) is None
    assert protocol.request_version(protocol.encode_slot(7, 0, 1, 30.0)) is None  # a reply, not a request
    refusal = protocol.encode_version_refusal(protocol.VERSION + 1)
    assert msgpack.unpackb(refusal[0]) == {"kind": "version_refused", "v": protocol.VERSION, "yours": protocol.VERSION + 1}
    assert protocol.decode_version_refusal(refusal) == protocol.VERSION
    assert protocol.decode_version_refusal(protocol.encode_slot(7, 0, 1, 30.0)) is None


def test_a_leasing_actor_of_another_version_exits_4_naming_both_versions(tmp_path, capfd):
    """The lease path (Compose's and Swarm's default): the learner answers the request with VERSION_REFUSED, says so
    once, and the actor exits 4 at its first answer instead of asking "no answer from the learner" forever."""
    cfg = small_config(actors=1, envs=1)
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path)).start()
    cmd = [sys.executable, "-m", "tests.support.other_version_actor", "--actors", "1", "--env.name", "fake"]
    cmd += ["--transport.base-port", str(cfg.transport.base_port), "--actor.slot-wait", "0"]
    try:
        actor = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert actor.returncode == 4, actor.stdout + actor.stderr
        skew = f"the learner speaks protocol version {protocol.VERSION}, this actor {protocol.VERSION + 1}"
        assert skew in actor.stderr, actor.stderr
        assert learner.server.refused_versions == {protocol.VERSION + 1}
    finally:
        learner.close()
    said = [line for line in capfd.readouterr().out.splitlines() if "asked for weights or a slot" in line]
    assert said == [
        f"[MAIN] an actor of protocol version {protocol.VERSION + 1} asked for weights or a slot; this learner speaks "
        f"{protocol.VERSION}: refused, naming both versions"
    ]


def test_a_checkpoint_this_network_cannot_load_is_named_and_latest_starts_over(tmp_path):
    runs = tmp_path / "runs"
    run_fake(runs, *TRAINING, "--learner.steps", "10")
    (run_dir,) = runs.iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    config["net"]["dueling"] = not config["net"]["dueling"]  # the checkpoint's head no longer fits
    (run_dir / "config.json").write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "launch.local", "--resume", str(run_dir), "--no-progress"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"error: resume={str(run_dir)!r}: its checkpoint does not fit this release's network (" in out.stderr
    latest = run_fake(runs, *TRAINING, "--resume", "latest", "--learner.steps", "10")
    assert "does not fit this release's network" in latest and "starting a new run" in latest
    assert len(os.listdir(runs)) == 2  # the new run beside the one left as it was
