"""docker/compose.yml without a Docker engine: valid Compose, Swarm-safe, and its services train as processes.

1. Both Compose files validate against the Compose specification schema (check-jsonschema's
   vendored ``compose-spec``).
2. The base file keeps what ``docker stack deploy`` needs: no container_name, no top-level name,
   short depends_on, no device reservations, an image on every service, actors scaled by replicas.
3. Each service's command and environment, read from the file, run as local processes (service
   names mapped to loopback, container paths to a temporary folder): the keys one-shot, the
   learner, and two actor replicas with identical configuration. They train together: the
   replicas hold distinct slots, epochs advance, the learner's weights reach both actors, the
   health check passes on the live learner and fails once it has stopped.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.support.paths import ROOT as ROOT_DIR
from tests.support.runs import free_base_port

ROOT = Path(ROOT_DIR)
BASE, GPU = ROOT / "docker" / "compose.yml", ROOT / "docker" / "compose.gpu.yml"
VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value, env: dict):
    """Compose's ${VAR:-default} substitution on every string of a loaded file."""
    if isinstance(value, str):
        return VARIABLE.sub(lambda m: env.get(m[1]) or (m[2] or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def test_compose_files_validate_against_the_compose_spec():
    checker = Path(sys.executable).parent / "check-jsonschema"
    out = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(BASE), str(GPU)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr


def test_base_file_keeps_the_rules_of_docker_stack_deploy():
    spec = yaml.safe_load(BASE.read_text())
    assert "name" not in spec  # Swarm rejects a top-level name
    assert set(spec["services"]) == {"keys", "learner", "actor"}
    for name, service in spec["services"].items():
        assert "container_name" not in service, name  # would stop --scale
        assert service.get("image"), name  # Swarm ignores build: it needs an image
        assert isinstance(service.get("depends_on", []), list), name  # the long form is Compose-only
        assert "devices" not in service.get("deploy", {}).get("resources", {}).get("reservations", {}), name
        assert "ports" not in service, name  # nothing published: replicas never collide
    assert spec["services"]["actor"]["deploy"]["replicas"] == "${WARPPIPE_ACTOR_REPLICAS:-4}"
    # keys split by who needs them: the learner's secret never reaches an actor container
    volumes = {name: set(mounts(interpolate(service, {})).values()) for name, service in spec["services"].items()}
    assert volumes == {"keys": {"learner-keys", "actor-keys"}, "learner": {"learner-keys", "runs"}, "actor": {"actor-keys"}}
    assert "--actor-id" not in spec["services"]["actor"]["command"]  # identical replicas lease their slots
    gpu = yaml.safe_load(GPU.read_text())
    assert gpu["services"]["learner"]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    # the GPU learner builds the Dockerfile's gpu target (a C compiler for Triton) under an image name of its own
    learner = gpu["services"]["learner"]
    assert learner["build"]["target"] == "gpu" and learner["image"] != spec["x-image"]["image"]
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?\n((?:(?!FROM ).*\n)*)", (ROOT / "docker" / "Dockerfile").read_text(), re.M)
    gpu_stage = next(body for _, name, body in stages if name == "gpu")
    assert re.search(r"apt-get install .*\bgcc\b", gpu_stage)
    assert stages[-1][0] == "runtime" and stages[-1][1] == ""  # the default target keeps no compiler


def mounts(service: dict) -> dict[str, str]:
    """A service's volumes as {path in the container: volume name}, the longest path first."""
    pairs = [entry.split(":")[:2] for entry in service.get("volumes", [])]
    return {dst: src for src, dst in sorted(pairs, key=lambda pair: -len(pair[1]))}


def service_process(service: dict, env: dict, tmp: Path, log: Path, health: Path) -> subprocess.Popen:
    """Start a service's command as a local process: each volume a folder tmp/<volume name> at the paths that
    service mounts it, service names on loopback."""

    def local(arg: str) -> str:
        for dst, volume in mounts(service).items():
            arg = re.sub(rf"{re.escape(dst)}(?=/|\b|$)", str(tmp / volume), arg)
        return arg.replace("learner:", "127.0.0.1:")

    command = [local(a) for a in service["command"]]
    if command[0] == "python":
        command[0] = sys.executable
    else:  # sh -c "python -m ..."
        command[-1] = command[-1].replace("python ", f"{shlex.quote(sys.executable)} ")
    environ = dict(
        os.environ, **{k: local(str(v)) for k, v in service.get("environment", {}).items()}, WARPPIPE_HEALTH_FILE=str(health)
    )
    return subprocess.Popen(command, cwd=ROOT, env=environ, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def test_compose_services_run_as_processes_and_train_together(tmp_path):
    env = {
        "WARPPIPE_PORT": str(free_base_port(4) + 2),
        "WARPPIPE_SLOTS": "2",
        "WARPPIPE_RUN_ARGS": "--env.name fake --env.frame-size 36 --actor.batch-steps 16",
        "WARPPIPE_LEARNER_ARGS": "--log-every 2 --learner.no-compile --learner.micro-batch 16 "
        "--learner.min-replay 300 --learner.updates-per-epoch 5 --learner.broadcast-env-steps 40 "
        "--replay.capacity 8192 --eval.every-env-steps 400 --eval.episodes 1",
    }
    services = interpolate(yaml.safe_load(BASE.read_text())["services"], env)
    logs = {name: tmp_path / f"{name}.log" for name in ("keys", "learner", "actor1", "actor2")}
    keys = service_process(services["keys"], env, tmp_path, logs["keys"], tmp_path / "keys.health")
    assert keys.wait(timeout=60) == 0, logs["keys"].read_text()
    held = {
        volume: sorted(str(p.relative_to(tmp_path / volume)) for p in (tmp_path / volume).rglob("*.key*"))
        for volume in ("learner-keys", "actor-keys")
    }
    assert held == {
        "learner-keys": ["allowed/actor.key", "learner.key", "learner.key_secret"],
        "actor-keys": ["actor.key", "actor.key_secret", "learner.key"],
    }
    learner = service_process(services["learner"], env, tmp_path, logs["learner"], tmp_path / "learner.health")
    actors = [service_process(services["actor"], env, tmp_path, logs[n], tmp_path / f"{n}.health") for n in ("actor1", "actor2")]
    health = dict(os.environ, WARPPIPE_HEALTH_FILE=str(tmp_path / "learner.health"))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (
            "[MAIN] Epoch 3 " in logs["learner"].read_text()
            and "[MAIN] Eval at " in logs["learner"].read_text()
            and (tmp_path / "learner.health").exists()
        ):
            assert learner.poll() is None, logs["learner"].read_text()
            time.sleep(0.5)
        alive = subprocess.run(
            [sys.executable, "-m", "launch.health"], env=health, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        learner.send_signal(signal.SIGTERM)  # what docker stop sends: final checkpoint, exit 0
        assert learner.wait(timeout=120) == 0, logs["learner"].read_text()
        dead = subprocess.run(
            [sys.executable, "-m", "launch.health"], env=health, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        for proc in actors:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in actors]
    finally:
        for proc in (learner, *actors):
            if proc.poll() is None:
                proc.kill()
    out = logs["learner"].read_text()
    actor_out = [logs[n].read_text() for n in ("actor1", "actor2")]
    slots = sorted(int(re.search(r"\[ACTOR\] slot (\d) of 2", text)[1]) for text in actor_out)
    epochs = [int(e) for e in re.findall(r"\[MAIN\] Epoch (\d+) ", out)]
    versions = re.search(r"actor weights versions \[(-?\d+), (-?\d+)\]", out)
    print(
        f"\nslots {slots}; epochs {epochs[0]}..{epochs[-1]}; {versions[0]}; health live: {alive.stdout.strip()!r}, "
        f"after stop: {dead.stdout.strip()!r}; actor exit codes {codes}"
    )
    assert slots == [0, 1]  # distinct slots, no per-replica setting
    assert len(epochs) >= 3 and epochs == sorted(epochs)
    assert min(int(versions[1]), int(versions[2])) >= 1  # the learner's weights reached both actors
    assert "[MAIN] run folder " + str(tmp_path / "runs") in out and "--resume latest: no run" in out
    # the evaluation process works beside a learner on 0.0.0.0 with CURVE (its weights come over a queue)
    assert "[MAIN] Eval at " in out and "evaluation process exited" not in out
    assert alive.returncode == 0 and alive.stdout.strip() == "healthy"
    assert dead.returncode == 1 and "is not running" in dead.stdout
    assert codes == [0, 0] and all('"batches"' in text for text in actor_out)
    # CURVE, the ratio held and leasing replicas, learner-bound: the small buffers keep every batch within the lag
    rejected = re.search(r"rejected by reason (\{.*\})", out)
    assert rejected and "stale_weights" not in rejected[1], rejected
