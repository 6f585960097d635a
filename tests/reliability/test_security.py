"""Security: CURVE keys and the learner's allow-list with real actor processes, a run's own keys when it spawns its
actors, loopback-only binding without keys, no pickle on any socket, checkpoints loaded with weights_only=True, pinned
dependency floors, and the key-making command."""

import ast
import configparser
import contextlib
import copy
import dataclasses
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
from actors.slot_client import lease_slot
from actors.weights_client import WeightClient
from launch.keys import KeysConfig, make_keys, run_transport
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.weight_server import WeightServer
from shared.config import ConfigError, TransportConfig
from shared.envs import env_spec
from shared.network import QNetwork, build_q_network
from shared.wire import curve
from shared.wire.links import open_socket
from tests.support.launcher import TRAINING, run_fake
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


# ---------------------------------------------------------------------------------------------- a run's own keys


def test_a_run_that_spawns_its_actors_keys_itself_and_refuses_a_plain_peer(tmp_path):
    """launch.local spawning its actors on loopback with no keys given (the default): its sockets are guarded by the
    run's own keys (launch/keys.py run_transport), as launch.local builds them. A plain-TCP peer, what any local user
    can open, gets no slot and no weights and its batch never reaches replay; a peer with the run's actor key gets a
    slot and the weights, and its batch lands."""
    cfg = small_config(actors=2, envs=1, steps=16, capacity=4096)
    transport, line = run_transport(cfg, str(tmp_path))
    assert cfg.transport.curve_server_secret == ""  # what config.json saves names no key: every start finds them
    assert transport.curve_server_secret and transport.curve_client_secret and "CURVE with the run's own keys" in line
    spec = env_spec(cfg.env)
    plane = DataPlane(dataclasses.replace(cfg, transport=transport).validate(), spec, torch.device("cpu")).start()
    server = WeightServer(transport, slots=plane.consolidator.slots)
    server.publish(7, build_q_network(spec, dueling=cfg.net.dueling))
    server.start()
    plain = TransportConfig(base_port=cfg.transport.base_port)  # no key: what any user of the machine can connect with
    ctx = zmq.Context.instance()
    plain_push = open_socket(ctx, zmq.PUSH, plain, server=False)
    keyed_push = open_socket(ctx, zmq.PUSH, transport, server=False)
    clients = []
    try:
        # the plain peer first, with the learner up: a batch at slot 1, then a slot and the weights asked for 2 s each
        plain_push.connect(f"tcp://127.0.0.1:{cfg.transport.base_port + 1}")
        with contextlib.suppress(zmq.Again):
            plain_push.send_multipart(valid_batch(cfg, actor=1, incarnation=6), flags=zmq.NOBLOCK)
        refused = lease_slot(plain, 6, 1, wait=2.0, echo=lambda _: None)
        assert refused is not None and refused["slot"] == -1 and refused["reason"].startswith("no answer"), refused
        clients.append(WeightClient(plain, 1, 6, build_q_network(spec, dueling=cfg.net.dueling)))
        assert clients[-1].fetch(have=-1, timeout=2.0) is None
        # nothing it sent was even read: no request of any kind counted
        counts = (server.slot_requests, server.weight_replies, server.throttled, server.up_to_date, server.bad_requests)
        assert counts == (0, 0, 0, 0, 0)
        # the run's actor key: the lowest slot (the plain peer claimed none), the weights, its batch in replay
        granted = lease_slot(transport, 5, 1, wait=60.0, echo=lambda _: None)  # a hang guard, not a timing
        assert granted is not None and granted["slot"] == 0, granted
        clients.append(WeightClient(transport, 0, 5, build_q_network(spec, dueling=cfg.net.dueling)))
        got = clients[-1].fetch(have=-1, timeout=60)
        assert got is not None and got[0] == 7
        keyed_push.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
        keyed_push.send_multipart(valid_batch(cfg, actor=0, incarnation=5))
        assert plane.wait_for(16, timeout=60)
        plane.drain()
        # the plain batch, sent seconds before, never arrived: one message received in all, slot 1 empty
        assert plane.consolidator.received == 1 and plane.stats().per_actor == [16, 0] and len(plane.replay) == 16
        assert plane.consolidator.slots.holder(1) is None
    finally:
        for client in clients:
            client.close()
        plain_push.close(linger=0)
        keyed_push.close(linger=0)
        server.stop()
        plane.close()
    assert curve._authenticators == {}  # the data plane and the weight server released the shared handler


def test_a_default_launch_local_run_on_loopback_trains_under_the_runs_own_keys(tmp_path):
    """The default path end to end (the launcher tests run plain TCP): spawned actors deliver over CURVE with the keys
    made in RUN/keys, and the run reaches its budget."""
    out = run_fake(tmp_path, *TRAINING, "--total-env-steps", "600", "--transport.no-open-loopback")
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert f"[MAIN] transport: CURVE with the run's own keys in {run_dir / 'keys'}" in out, out
    assert "env-step budget" in out and "rejected 0" in out, out


def test_the_runs_own_keys_are_private_and_every_later_start_reuses_them(tmp_path):
    cfg = small_config(actors=1, envs=1)
    run_dir = tmp_path / "run"
    first, _ = run_transport(cfg, str(run_dir))
    folder = run_dir / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("learner", "actor"):
        assert stat.S_IMODE((folder / f"{name}.key_secret").stat().st_mode) == 0o600
        assert zmq.auth.load_certificate(str(folder / f"{name}.key_secret"))[1] is not None
    assert [p.name for p in (folder / "allowed").iterdir()] == ["actor.key"]  # the spawned actors' key, and only it
    assert (folder / "allowed" / "actor.key").read_bytes() == (folder / "actor.key").read_bytes()
    assert first.curve_server_public == str(folder / "learner.key") and first.curve_authorized_dir == str(folder / "allowed")
    secrets = {p.name: p.read_bytes() for p in folder.glob("*.key_secret")}
    again, _ = run_transport(cfg, str(run_dir))  # a resume: the same keys, none made anew
    assert again == first and {p.name: p.read_bytes() for p in folder.glob("*.key_secret")} == secrets
    loose = tmp_path / "loose"
    (loose / "keys").mkdir(parents=True, mode=0o755)
    os.chmod(loose / "keys", 0o755)  # a key folder left readable (mkdir's mode is masked by the umask)
    run_transport(cfg, str(loose))
    assert stat.S_IMODE((loose / "keys").stat().st_mode) == 0o700


def test_given_keys_win_the_opt_out_stays_plain_and_a_learner_alone_on_loopback_is_said_open(keys, tmp_path):
    folder, allowed = keys
    given = small_config(actors=1, envs=1)
    given.transport.curve_server_secret = str(folder / "learner.key_secret")
    given.transport.curve_authorized_dir = str(allowed)
    given.transport.curve_client_secret = str(folder / "allowed.key_secret")
    given.transport.curve_server_public = str(folder / "learner.key")
    given.validate()
    assert run_transport(given, str(tmp_path / "given")) == (given.transport, "")
    opted = small_config(actors=1, envs=1)
    opted.transport.open_loopback = True
    transport, line = run_transport(opted.validate(), str(tmp_path / "opted"))
    assert transport == opted.transport and not transport.curve_server_secret
    assert line.startswith("[MAIN] warning: the learner listens on 127.0.0.1 without CURVE")
    assert "--transport.open-loopback" in line
    alone = small_config(actors=1, envs=1)
    alone.spawn_actors = False  # launch.learner, or launch.local --no-spawn-actors: its actors run elsewhere
    transport, line = run_transport(alone.validate(), str(tmp_path / "alone"))
    assert transport == alone.transport and "any user of this machine can take its slots" in line and "launch.keys" in line
    assert not [name for name in ("given", "opted", "alone") if (tmp_path / name / "keys").exists()]
    with pytest.raises(ConfigError, match=r"transport.open_loopback=True must be off when CURVE keys are given"):
        dataclasses.replace(given.transport, open_loopback=True).validate()


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
