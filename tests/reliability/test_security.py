"""Security: CURVE keys and the learner's allow-list with real actor processes, loopback-only
binding without keys, no pickle on any socket, checkpoints loaded with weights_only=True, pinned
dependency floors, and the key-making command."""

import ast
import configparser
import copy
import logging
import os
import pathlib
import queue
import stat
import subprocess
import sys
import time

import pytest
import torch
import zmq
import zmq.auth
from packaging.requirements import Requirement

from actors.collector import actor_main
from launch.keys import KeysConfig, make_keys
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.weight_server import WeightServer
from shared.config import ConfigError, TransportConfig
from shared.envs import env_spec
from shared.network import QNetwork
from shared.wire import curve
from tests.support.messages import valid_batch
from tests.support.paths import ROOT as ROOT_DIR
from tests.support.runs import free_base_port, small_config

ROOT = pathlib.Path(ROOT_DIR)


@pytest.fixture
def keys(tmp_path):
    """Key pairs for the learner, an allowed actor and an unlisted one; only 'allowed' is in the allow-list."""
    folder, allowed = tmp_path / "keys", tmp_path / "allowed"
    make_keys(KeysConfig(dir=str(folder), name=("learner", "allowed"), authorize=str(allowed)))
    make_keys(KeysConfig(dir=str(folder), name=("stranger",)))
    return folder, allowed


def actor_config(cfg, folder, name):
    """What a remote actor runs with: its own secret and the learner's public key, no learner secrets."""
    out = copy.deepcopy(cfg)
    out.transport.curve_server_secret = out.transport.curve_authorized_dir = ""
    out.transport.curve_client_secret = str(folder / f"{name}.key_secret")
    out.transport.curve_server_public = str(folder / "learner.key")
    out.actor.weights_timeout = 3.0
    return out.validate()


def public_z85(path) -> str:
    return zmq.auth.load_certificate(str(path))[0].decode()


# ---------------------------------------------------------------------------------------------- CURVE, end to end


def test_only_listed_actor_keys_deliver_transitions_or_get_weights(keys, caplog):
    folder, allowed = keys
    caplog.set_level(logging.DEBUG, logger="zmq.auth")
    cfg = small_config(actors=2, envs=1, steps=16, capacity=4096)
    cfg.transport.curve_server_secret = str(folder / "learner.key_secret")
    cfg.transport.curve_authorized_dir = str(allowed)
    cfg.spawn_actors = False  # the learner of remote actors: it holds no actor key
    cfg.learner.exact_ratio = False  # the refused actor plays its 10 batches and drops them instead of waiting
    cfg.validate()
    actor_cfgs = [actor_config(cfg, folder, "allowed"), actor_config(cfg, folder, "stranger")]
    num_actions = env_spec(cfg.env).num_actions
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    server = WeightServer(cfg.transport)
    server.publish(7, QNetwork(cfg.env.stack, num_actions, cfg.env.frame_size, dueling=cfg.net.dueling))
    server.start()
    # a client without any key, straight at the stranger's slot: a well-formed batch must not arrive either
    keyless = zmq.Context.instance().socket(zmq.PUSH)
    keyless.setsockopt(zmq.LINGER, 0)
    keyless.connect(f"tcp://127.0.0.1:{cfg.transport.base_port + 1}")
    batch = valid_batch(cfg, actor=1)
    try:
        keyless.send_multipart(batch, flags=zmq.NOBLOCK)
    except zmq.Again:
        pass
    ctx = spawn_context()
    stop, reports = ctx.Event(), ctx.Queue()
    procs = [start_process(ctx, actor_main, (actor_cfgs[slot], slot, stop, reports, 10), f"actor-{slot}") for slot in range(2)]
    results = []
    deadline = time.monotonic() + 120  # a hang guard, not a timing assertion
    try:
        while len(results) < 2 and all(p.is_alive() or p.exitcode == 0 for p in procs) and time.monotonic() < deadline:
            plane.drain(timeout=0.05)
            try:
                results.append(reports.get_nowait())
            except queue.Empty:
                pass
        codes = stop_processes(procs, stop, timeout=20)
        allowed_report = next(r for r in results if r["actor"] == 0)
        assert plane.wait_for(allowed_report["sent_transitions"], timeout=30)
        plane.drain()
    finally:
        stop_processes(procs, stop, timeout=5)
        keyless.close()
        server.stop()
        plane.close()
    assert codes == [0, 0] and len(results) == 2
    listed, stranger = sorted(results, key=lambda r: r["actor"])
    # the listed actor: weights before its first action, every transition in replay
    assert listed["first_action_weights_version"] == 7 and listed["weights_version"] == 7
    assert listed["sent_transitions"] == 10 * 16
    # the unlisted one played all its batches and was refused everything: no weights, no transition
    assert stranger["batches"] == 10
    assert stranger["first_action_weights_version"] == 0 and stranger["weights_version"] == 0
    stats = plane.stats()
    assert stats.per_actor == [10 * 16, 0]
    assert plane.consolidator.tracks[1].accepted_batches == 0
    assert plane.consolidator.received == 10  # nothing at all arrived on the stranger's slot, not even a reject
    assert list(plane.replay.heads) == [10 * 16, 0] and len(plane.replay) == 10 * 16
    # the allow-list itself refused the stranger's key (so it did try) and never the listed one
    denied = [r.getMessage() for r in caplog.records if r.name == "zmq.auth" and "DENIED" in r.getMessage()]
    assert any(public_z85(folder / "stranger.key") in m for m in denied)
    assert not any(public_z85(folder / "allowed.key") in m for m in denied)
    assert curve._authenticators == {}  # the data plane and the weight server released the shared handler


def test_server_sockets_refuse_everyone_when_no_allow_list_runs(keys):
    """Fail closed: a CURVE server socket whose ZAP handler is missing admits no one, not every one."""
    folder, allowed = keys
    transport = TransportConfig(
        base_port=free_base_port(1), curve_server_secret=str(folder / "learner.key_secret"), curve_authorized_dir=str(allowed)
    )
    client = TransportConfig(
        base_port=transport.base_port,
        curve_client_secret=str(folder / "allowed.key_secret"),
        curve_server_public=str(folder / "learner.key"),
    )
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        curve.server_socket_options(pull, transport)  # no start_authenticator
        pull.bind(f"tcp://127.0.0.1:{transport.base_port}")
        curve.client_socket_options(push, client)
        push.connect(f"tcp://127.0.0.1:{transport.base_port}")
        push.send(b"x")
        assert pull.poll(1500) == 0
    finally:
        pull.close(linger=0)
        push.close(linger=0)
        ctx.term()


# ---------------------------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("host", ["10.1.2.3", "0.0.0.0", "learner.example.org"])
def test_non_loopback_host_without_keys_is_refused(host):
    with pytest.raises(ConfigError) as err:
        TransportConfig(host=host).validate()
    assert f"transport.host={host!r}" in str(err.value) and "CURVE" in str(err.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.5"])
def test_loopback_host_needs_no_keys(host):
    TransportConfig(host=host).validate()


def test_non_loopback_host_with_keys_validates(keys):
    folder, allowed = keys
    TransportConfig(
        host="0.0.0.0", curve_server_secret=str(folder / "learner.key_secret"), curve_authorized_dir=str(allowed)
    ).validate()
    TransportConfig(
        host="10.1.2.3", curve_client_secret=str(folder / "allowed.key_secret"), curve_server_public=str(folder / "learner.key")
    ).validate()
    assert TransportConfig().host == "127.0.0.1"  # the default binds to loopback


def test_bad_key_settings_name_the_field_and_value(keys, tmp_path):
    folder, allowed = keys
    secret, public = str(folder / "learner.key_secret"), str(folder / "learner.key")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (dict(curve_server_secret=secret), "transport.curve_authorized_dir=''"),
        (dict(curve_authorized_dir=str(allowed)), "transport.curve_server_secret=''"),
        (dict(curve_client_secret=secret), "transport.curve_server_public=''"),
        (dict(curve_server_public=public), "transport.curve_client_secret=''"),
        (
            dict(curve_server_secret=str(tmp_path / "nope"), curve_authorized_dir=str(allowed)),
            f"transport.curve_server_secret={str(tmp_path / 'nope')!r} is not a file",
        ),
        (
            dict(curve_server_secret=public, curve_authorized_dir=str(allowed)),  # a public file given as the secret
            f"transport.curve_server_secret={public!r} holds no secret key",
        ),
        (
            dict(curve_server_secret=secret, curve_authorized_dir=str(tmp_path / "nope")),
            f"transport.curve_authorized_dir={str(tmp_path / 'nope')!r} is not a folder",
        ),
        (
            dict(curve_server_secret=secret, curve_authorized_dir=str(empty)),
            f"transport.curve_authorized_dir={str(empty)!r} holds no public key",
        ),
    ]
    for fields, message in cases:
        with pytest.raises(ConfigError) as err:
            TransportConfig(**fields).validate()
        assert message in str(err.value), (fields, str(err.value))


def test_learner_that_spawns_its_own_actors_needs_their_keys_too(keys):
    folder, allowed = keys
    cfg = small_config(actors=1, envs=1)
    cfg.transport.curve_server_secret = str(folder / "learner.key_secret")
    cfg.transport.curve_authorized_dir = str(allowed)
    with pytest.raises(ConfigError, match=r"transport.curve_client_secret='' must be set"):
        cfg.validate()
    cfg.transport.curve_client_secret = str(folder / "allowed.key_secret")
    cfg.transport.curve_server_public = str(folder / "learner.key")
    cfg.validate()
    cfg.transport.curve_client_secret = cfg.transport.curve_server_public = ""
    cfg.spawn_actors = False
    cfg.validate()


def test_sockets_refuse_a_non_loopback_host_without_keys_even_unvalidated():
    """Defence in depth: the socket helpers check too, for code that skips validate()."""
    transport = TransportConfig(host="0.0.0.0")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        with pytest.raises(ConfigError, match="transport.curve_server_secret"):
            curve.server_socket_options(sock, transport)
        with pytest.raises(ConfigError, match="transport.curve_client_secret"):
            curve.client_socket_options(sock, transport)
    finally:
        sock.close(linger=0)
        ctx.term()


# ---------------------------------------------------------------------------------------------- source scans

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill", "shelve", "marshal"}
FORBIDDEN_NAMES = FORBIDDEN_MODULES | {"recv_pyobj", "send_pyobj"}


def unsafe_uses(source: str, filename: str = "<string>") -> list[str]:
    """Deserialisation that can run code: pickle-family imports and names, pyzmq's *_pyobj, allow_pickle=True,
    and torch.load without weights_only=True. Code only; words in comments and docstrings do not count."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{where} from {node.module} import")
            if node.module == "torch" and any(a.name == "load" for a in node.names):
                found.append(f"{where} from torch import load")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"{where} {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
            found.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.Call):
            if any(
                k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                for k in node.keywords
            ):
                found.append(f"{where} allow_pickle")
            if is_torch_load(node) and not any(
                k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords
            ):
                found.append(f"{where} torch.load without weights_only=True")
    return found


def is_torch_load(node: ast.Call) -> bool:
    f = node.func
    return isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "torch"


def project_sources() -> list[pathlib.Path]:
    return sorted(p for d in ("actors", "learner", "shared", "launch") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle",
        "import cPickle as p",
        "from pickle import loads",
        "import dill",
        "x = pickle.loads(b)",
        "sock.recv_pyobj()",
        "sock.send_pyobj({})",
        "np.load(f, allow_pickle=True)",
        "torch.load(p)",
        "torch.load(p, weights_only=False)",
        "torch.load(p, map_location='cpu')",
        "from torch import load",
    ],
)
def test_scanner_catches(snippet):
    assert unsafe_uses(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        '"""Frames are never pickled."""',
        "# no pickle here",
        "torch.load(p, map_location='cpu', weights_only=True)",
        "msgpack.unpackb(b, raw=False)",
        "np.load(f)",
    ],
)
def test_scanner_passes(snippet):
    assert unsafe_uses(snippet) == []


def test_no_pickle_or_unsafe_load_in_project_code():
    files = project_sources()
    assert len(files) >= 15 and ROOT / "learner" / "checkpoint.py" in files
    found = [hit for p in files for hit in unsafe_uses(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_checkpoints_load_only_with_weights_only():
    """Every torch.load in project code passes weights_only=True, and there is at least one (the checkpoint)."""
    calls = []
    for path in project_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and is_torch_load(node):
                calls.append((str(path.relative_to(ROOT)), node))
    assert any(where == os.path.join("learner", "checkpoint.py") for where, _ in calls)
    for where, node in calls:
        flags = {k.arg: k.value for k in node.keywords}
        assert isinstance(flags.get("weights_only"), ast.Constant) and flags["weights_only"].value is True, where


def test_setup_cfg_pins_patched_torch_and_msgpack():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = [ln.strip() for ln in parser["options"]["install_requires"].splitlines()]
    reqs = {}
    for line in lines:
        if line and not line.startswith("#"):
            req = Requirement(line)
            reqs.setdefault(req.name.lower(), []).append(req.specifier)
    for name, ok, too_old in (("torch", "2.10.0", "2.9.1"), ("msgpack", "1.2.1", "1.2.0")):
        assert name in reqs, name
        for spec in reqs[name]:
            assert spec.contains(ok) and not spec.contains(too_old), f"{name}{spec}"


# ---------------------------------------------------------------------------------------------- the key command


def test_keys_command_writes_loadable_certificates(tmp_path):
    folder, allowed = tmp_path / "keys", tmp_path / "allowed"
    cmd = [sys.executable, "-m", "launch.keys", str(folder), "--name", "learner", "actor0", "--authorize", str(allowed)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("learner", "actor0"):
        public, secret = folder / f"{name}.key", folder / f"{name}.key_secret"
        assert str(public) in done.stdout and str(secret) in done.stdout
        pub_key, no_secret = zmq.auth.load_certificate(str(public))
        pub_again, secret_key = zmq.auth.load_certificate(str(secret))
        assert no_secret is None and secret_key is not None and len(secret_key) == 40 and pub_key == pub_again
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert (allowed / f"{name}.key").read_bytes() == public.read_bytes()
    assert "--transport.curve-server-secret" in done.stdout and "--transport.curve-client-secret" in done.stdout
    TransportConfig(
        host="0.0.0.0", curve_server_secret=str(folder / "learner.key_secret"), curve_authorized_dir=str(allowed)
    ).validate()
    before = (folder / "learner.key_secret").read_bytes()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr  # never overwrites a key silently
    assert (folder / "learner.key_secret").read_bytes() == before
