"""docker/k8s/ without a cluster: valid Kubernetes objects that run what docker/compose.yml runs.

1. Every manifest kustomization.yaml lists, and the learner with gpu-patch.yaml merged in, validates against the
   Kubernetes schema offline (kubernetes-validate's bundled JSON schemas, strict: an unknown field fails), for the
   oldest and the newest Kubernetes version the package ships.
2. The learner's and the actors' commands and WARPPIPE_ARGS, with config.yaml's values put in, are docker/compose.yml's
   with its defaults; the probes are the image's HEALTHCHECK; the learner's Service is headless and lists the ports
   the actors connect to; learner and actors mount one Secret, each only the key files its own flags name.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT as ROOT_DIR

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (pip install -e '.[dev]'): it checks docker/k8s/"
)

ROOT = Path(ROOT_DIR)
K8S = ROOT / "docker" / "k8s"
COMPOSE, COMPOSE_GPU = ROOT / "docker" / "compose.yml", ROOT / "docker" / "compose.gpu.yml"
COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")  # ${NAME:-default}
K8S_VARIABLE = re.compile(r"\$\((\w+)\)")  # $(NAME), expanded by the kubelet from the container's environment
PATCH = "gpu-patch.yaml"


def load(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def listed() -> list[str]:
    return load("kustomization.yaml")[0]["resources"]


def objects() -> dict[tuple[str, str], dict]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for name in listed() for doc in load(name)}


def compose_service(name: str, path: Path = COMPOSE) -> dict:
    return yaml.safe_load(path.read_text())["services"][name]


def compose_defaults(value):
    """Compose's ${NAME:-default} with nothing set: every default."""
    if isinstance(value, list):
        return [compose_defaults(v) for v in value]
    return COMPOSE_VARIABLE.sub(lambda m: m[2] or "", value)


def as_k8s_references(value: str) -> str:
    """Compose's ${NAME:-...} written as the kubelet's $(NAME)."""
    return COMPOSE_VARIABLE.sub(lambda m: f"$({m[1]})", value)


def config() -> dict[str, str]:
    return objects()[("ConfigMap", "warppipe")]["data"]


def pod(kind: str, name: str) -> dict:
    return objects()[(kind, name)]["spec"]["template"]["spec"]


def container(kind: str, name: str) -> dict:
    (only,) = pod(kind, name)["containers"]
    return only


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's $(NAME) expansion; a name the container does not define would stay as written: fail instead."""

    def one(m: re.Match) -> str:
        assert m[1] in env, f"$({m[1]}) is not defined in the container's environment"
        return env[m[1]]

    return K8S_VARIABLE.sub(one, value)


def environment(kind: str, name: str) -> dict[str, str]:
    """The variables the container's command can refer to: its ConfigMaps (envFrom) first, then env: in order."""
    c, env = container(kind, name), {}
    for source in c.get("envFrom", []):
        assert objects()[("ConfigMap", source["configMapRef"]["name"])]
        env.update(objects()[("ConfigMap", source["configMapRef"]["name"])]["data"])
    for entry in c.get("env", []):
        env[entry["name"]] = expand(entry["value"], env)
    return env


def command(kind: str, name: str) -> list[str]:
    env = environment(kind, name)
    return [expand(arg, env) for arg in container(kind, name)["command"] + container(kind, name).get("args", [])]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def mounted_keys(kind: str, name: str) -> tuple[str, dict[str, str]]:
    """The Secret behind the container's /keys mount and {path in the container: the Secret's key}."""
    c, spec = container(kind, name), pod(kind, name)
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/keys"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert mount.get("readOnly") is True
    return secret["secretName"], {f"{mount['mountPath']}/{item['path']}": item["key"] for item in secret["items"]}


def merge(base, patch):
    """A strategic-merge patch as kubectl and kustomize apply it to these fields: maps merged, lists of named maps
    merged by name, anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {k: merge(base[k], v) if k in base else v for k, v in patch.items()} | {
            k: v for k, v in base.items() if k not in patch
        }
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(x, dict) and "name" in x for x in base + patch):
        names = {x["name"]: x for x in patch}
        return [merge(x, names.pop(x["name"])) if x["name"] in names else x for x in base] + list(names.values())
    return patch


def learner_on_a_gpu() -> dict:
    (patch,) = load(PATCH)
    return merge(objects()[("StatefulSet", "learner")], patch)


def test_every_manifest_validates_against_the_kubernetes_schema_offline():
    files = sorted(p.name for p in K8S.glob("*.yaml"))
    assert sorted(listed() + ["kustomization.yaml", PATCH]) == files  # every manifest applied; the patch optional
    docs = [doc for name in listed() for doc in load(name)] + [learner_on_a_gpu()]
    versions, invalid = kubernetes_validate.utils.all_versions(), []
    for version in (versions[0], versions[-1]):  # the oldest and the newest schemas the package ships
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                invalid.append(f"{doc['kind']}/{doc['metadata']['name']} against Kubernetes {version}: {exc.message}")
    assert not invalid, invalid


def test_the_learner_and_the_actors_run_what_compose_runs():
    for kind, name in (("StatefulSet", "learner"), ("Deployment", "actor")):
        service = compose_service(name)
        assert command(kind, name) == compose_defaults(service["command"]), name
        args = {e["name"]: e["value"] for e in container(kind, name)["env"]}["WARPPIPE_ARGS"]
        assert args == as_k8s_references(service["environment"]["WARPPIPE_ARGS"]), name
        expanded = environment(kind, name)["WARPPIPE_ARGS"]
        assert expanded.strip() == compose_defaults(service["environment"]["WARPPIPE_ARGS"]).strip(), name
        assert container(kind, name)["image"] == compose_defaults(yaml.safe_load(COMPOSE.read_text())["x-image"]["image"])
        # Compose's init: true (a reaper as PID 1) and stop_grace_period
        assert pod(kind, name)["shareProcessNamespace"] is True
        assert f"{pod(kind, name)['terminationGracePeriodSeconds']}s" == service["stop_grace_period"], name
    # the ConfigMap holds Compose's defaults
    defaults = dict(COMPOSE_VARIABLE.findall(COMPOSE.read_text()))
    assert config() == {k: defaults[k] for k in config()}
    assert "--actor-id" not in container("Deployment", "actor")["command"]  # identical replicas lease their slots
    replicas = compose_service("actor")["deploy"]["replicas"]
    assert objects()[("Deployment", "actor")]["spec"]["replicas"] == int(compose_defaults(replicas))


def test_the_learner_is_one_statefulset_replica_with_its_runs_on_a_claim():
    learner = objects()[("StatefulSet", "learner")]["spec"]
    assert learner["replicas"] == 1
    run_dir = flag(command("StatefulSet", "learner"), "--run-dir")
    (mount,) = [m for m in container("StatefulSet", "learner")["volumeMounts"] if m["mountPath"] == run_dir]
    assert [t["metadata"]["name"] for t in learner["volumeClaimTemplates"]] == [mount["name"]]
    assert flag(command("StatefulSet", "learner"), "--resume") == "latest"  # a restarted pod continues its run
    uid = re.search(r"useradd .*--uid (\d+)", (ROOT / "docker" / "Dockerfile").read_text())[1]
    for kind, name in (("StatefulSet", "learner"), ("Deployment", "actor")):
        assert str(pod(kind, name)["securityContext"]["runAsUser"]) == uid  # the image's user, who owns /runs


def test_the_probes_run_the_images_health_check():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    options, cmd = re.search(r"^HEALTHCHECK (.*?) \\\n\s+CMD (\[.*\])", dockerfile, re.M).groups()
    seconds = {k: int(v) for k, v in re.findall(r"--([\w-]+)=(\d+)s?", options)}
    health = json.loads(cmd)
    assert health[:3] == ["python", "-m", "launch.health"]
    for kind, name in (("StatefulSet", "learner"), ("Deployment", "actor")):
        c = container(kind, name)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c[probe]["exec"]["command"] == health, (name, probe)
            assert c[probe]["timeoutSeconds"] == seconds["timeout"], (name, probe)
        live, start = c["livenessProbe"], c["startupProbe"]
        assert (live["periodSeconds"], live["failureThreshold"]) == (seconds["interval"], seconds["retries"]), name
        assert start["periodSeconds"] * start["failureThreshold"] >= seconds["start-period"], name


def test_the_learner_service_is_headless_and_lists_the_ports_the_actors_connect_to():
    service = objects()[("Service", "learner")]["spec"]
    assert service["clusterIP"] == "None"
    assert service["publishNotReadyAddresses"] is True  # the name resolves while the learner starts, as in Compose
    learner = objects()[("StatefulSet", "learner")]["spec"]
    assert learner["serviceName"] == "learner"
    assert service["selector"].items() <= learner["template"]["metadata"]["labels"].items()
    assert not service["selector"].items() <= objects()[("Deployment", "actor")]["spec"]["template"]["metadata"]["labels"].items()
    host, port = flag(command("Deployment", "actor"), "--learner").rsplit(":", 1)
    assert host == "learner" and port == flag(command("StatefulSet", "learner"), "--transport.base-port")
    slots = int(flag(command("StatefulSet", "learner"), "--actors"))
    base = int(port)
    wanted = {base - 2, base - 1} | {base + slot for slot in range(slots)}  # requests, weights, one per slot
    assert {p["port"] for p in service["ports"]} == wanted
    assert all(p["targetPort"] == p["port"] and p["protocol"] == "TCP" for p in service["ports"])
    assert {p["containerPort"] for p in container("StatefulSet", "learner")["ports"]} == wanted


def test_keys_come_from_one_secret_each_side_mounting_only_its_own(tmp_path):
    from launch.keys import KeysConfig, make_keys

    learner_secret, learner_files = mounted_keys("StatefulSet", "learner")
    actor_secret, actor_files = mounted_keys("Deployment", "actor")
    assert learner_secret == actor_secret
    learner, actor = command("StatefulSet", "learner"), command("Deployment", "actor")
    allowed = flag(learner, "--transport.curve-authorized-dir")
    assert learner_files[flag(learner, "--transport.curve-server-secret")] == "learner.key_secret"
    assert [key for path, key in learner_files.items() if path.startswith(allowed + "/")] == ["actor.key"]
    assert actor_files[flag(actor, "--transport.curve-client-secret")] == "actor.key_secret"
    assert actor_files[flag(actor, "--transport.curve-server-public")] == "learner.key"
    assert "actor.key_secret" not in learner_files.values() and "learner.key_secret" not in actor_files.values()
    # the Secret the docs create from the project's key tool holds every key the two mounts name
    make_keys(KeysConfig(dir=str(tmp_path), name=("learner", "actor")))
    made = {p.name for p in tmp_path.iterdir()}
    assert set(learner_files.values()) | set(actor_files.values()) <= made
    docs = (ROOT / "docs" / "deployment.md").read_text()
    assert f"kubectl create secret generic {learner_secret} --from-file=keys/" in docs
    assert "python -m launch.keys keys --name learner actor" in docs


def test_the_gpu_patch_is_compose_gpu_for_the_learner():
    gpu = learner_on_a_gpu()["spec"]["template"]["spec"]
    (c,) = gpu["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    service = compose_service("learner", COMPOSE_GPU)
    assert c["image"] == compose_defaults(service["image"])
    args = {e["name"]: e["value"] for e in c["env"]}["WARPPIPE_ARGS"]
    assert args == as_k8s_references(service["environment"]["WARPPIPE_ARGS"])
    assert c["command"] == container("StatefulSet", "learner")["command"]  # the patch changes the image, not the run
    assert "nvidia.com/gpu" not in str(pod("Deployment", "actor"))  # the actors stay on the CPU image
