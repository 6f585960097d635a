"""Make CURVE key pairs for the learner and the actors (ZeroMQ certificates, pyzmq's create_certificates), and a run's own.

    python -m launch.keys keys --name learner                          # keys/learner.key + keys/learner.key_secret
    python -m launch.keys keys --name actor0 actor1 --authorize keys/allowed   # actor keys, publics into the allow-list

NAME.key is the public certificate (share it); NAME.key_secret holds the secret key too (keep it on the machine that
uses it; written with mode 600). The learner admits exactly the actors whose NAME.key is in its
``--transport.curve-authorized-dir``. Existing files are never overwritten without --force (docker/compose.yml's keys
service passes --keep, which keeps whole pairs).

``launch.local`` spawning its actors on loopback with no ``--transport.curve-*`` option makes the run's own keys in
``RUN/keys`` (:func:`run_transport`), so no other local user can take its slots, fetch its weights or fill its replay.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from dataclasses import dataclass

import tyro
import zmq.auth

from launch.cli import UsageError, parse
from shared.config import RunConfig, TransportConfig, is_loopback

PAIR = (".key", ".key_secret")  # a key pair's files: NAME.key (public), NAME.key_secret
RUN_KEYS = "keys"  # a run folder's own keys: the learner's pair, the spawned actors' pair, allowed/ (their public key)


@dataclass
class KeysConfig:
    """Make CURVE key pairs: NAME.key (public) and NAME.key_secret (secret) in DIR."""

    dir: tyro.conf.Positional[str]
    """Folder the key files go to (created if missing)."""
    name: tuple[str, ...] = ("learner",)
    """One key pair per name, e.g. --name learner, or --name actor0 actor1."""
    authorize: str = ""
    """Also copy each new public key (NAME.key) into this folder: an actor key into the learner's
    --transport.curve-authorized-dir, the learner's key into the folder its actors read it from."""
    force: bool = False
    """Overwrite existing key files."""
    keep: bool = False
    """Keep every name whose key pair already exists and make only the missing ones (exit 0): for a one-shot container
    that runs at every start."""


def make_keys(cfg: KeysConfig) -> list[tuple[str, str]]:
    """Write the key pairs: (public, secret) paths per name made; ValueError on a bad name or an existing file."""
    if not cfg.name or len(set(cfg.name)) != len(cfg.name):
        raise ValueError(f"name={list(cfg.name)!r} must list at least one name, each once")
    for name in cfg.name:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ValueError(f"name={name!r} must be letters, digits, '_', '.', '-' (it becomes a file name)")
    keep = cfg.keep and not cfg.force  # every whole pair; the others are made, a half-written one again
    kept = [n for n in cfg.name if keep and all(os.path.exists(os.path.join(cfg.dir, n + ext)) for ext in PAIR)]
    names = [n for n in cfg.name if n not in kept]
    targets = [os.path.join(cfg.dir, n + ext) for n in names for ext in PAIR]
    if cfg.authorize:
        targets += [os.path.join(cfg.authorize, f"{n}.key") for n in names]
    if not (cfg.force or cfg.keep) and (existing := [p for p in targets if os.path.exists(p)]):
        raise ValueError(f"{existing} already exist; pass --force to overwrite")
    os.makedirs(cfg.dir, exist_ok=True)
    if cfg.authorize:
        os.makedirs(cfg.authorize, exist_ok=True)
        for n in kept:  # a kept pair's public half still belongs in the allow-list
            copy = os.path.join(cfg.authorize, f"{n}.key")
            if not os.path.exists(copy):
                shutil.copyfile(os.path.join(cfg.dir, f"{n}.key"), copy)
    made = []
    for name in names:
        umask = os.umask(0o077)  # the secret file is never readable by others, not even for a moment
        try:
            public, secret = zmq.auth.create_certificates(cfg.dir, name)
        finally:
            os.umask(umask)
        os.chmod(public, 0o644)
        os.chmod(secret, 0o600)
        if cfg.authorize and os.path.abspath(os.path.dirname(public)) != os.path.abspath(cfg.authorize):
            shutil.copyfile(public, os.path.join(cfg.authorize, os.path.basename(public)))
        made.append((public, secret))
    return made


def run_keys(run_dir: str, transport: TransportConfig) -> TransportConfig:
    """``transport`` with the run's own CURVE keys in ``RUN/keys`` (mode 700, secrets 600): the learner's pair, one pair
    every spawned actor uses and ``allowed/`` holding that actor's public key alone. Made at the run's first start,
    kept by every later one (a resume)."""
    folder = os.path.join(run_dir, RUN_KEYS)
    allowed = os.path.join(folder, "allowed")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)  # a folder that existed keeps its mode otherwise; 700 hides the names too
    make_keys(KeysConfig(dir=folder, name=("learner",), keep=True))
    make_keys(KeysConfig(dir=folder, name=("actor",), authorize=allowed, keep=True))  # the allow-list: this key alone
    return dataclasses.replace(
        transport,
        curve_server_secret=os.path.join(folder, "learner.key_secret"),
        curve_authorized_dir=allowed,
        curve_client_secret=os.path.join(folder, "actor.key_secret"),
        curve_server_public=os.path.join(folder, "learner.key"),
    )


def run_transport(cfg: RunConfig, run_dir: str) -> tuple[TransportConfig, str]:
    """The transport this start of the run binds and its spawned actors connect with, and a line saying how it is
    guarded ('' when nothing needs saying). Keys given (``--transport.curve-*``) are used as they are; spawning its own
    actors on loopback without them, the run's own keys (:func:`run_keys`) unless ``--transport.open-loopback``;
    a learner on loopback without keys for actors started elsewhere (``--no-spawn-actors``) stays open, said in a
    warning. config.json does not name the run's keys: every start finds them in ``RUN/keys``."""
    t = cfg.transport
    if t.curve_server_secret or t.curve_client_secret or not is_loopback(t.host):  # the given keys (validated)
        return t, ""
    open_line = (
        f"[MAIN] warning: the learner listens on {t.host} without CURVE: any user of this machine can take its slots, "
        "fetch its weights and send it experience"
    )
    if not cfg.spawn_actors:
        return t, f"{open_line} (python -m launch.keys makes keys; see docs/security.md)"
    if t.open_loopback:
        return t, f"{open_line} (--transport.open-loopback)"
    keyed = run_keys(run_dir, t)
    keyed.validate()
    line = (
        f"[MAIN] transport: CURVE with the run's own keys in {os.path.join(run_dir, RUN_KEYS)}; another actor joins with "
        f"--transport.curve-client-secret {keyed.curve_client_secret} --transport.curve-server-public {keyed.curve_server_public}"
    )
    return keyed, line


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse(KeysConfig, argv, "python -m launch.keys", KeysConfig.__doc__)
        made = make_keys(cfg)
    except (UsageError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    names = [os.path.basename(public)[: -len(".key")] for public, _ in made]
    for name in cfg.name:
        if name not in names:
            print(f"[KEYS] {name}: kept the existing pair in {cfg.dir}")
    for name, (public, secret) in zip(names, made, strict=True):
        print(f"[KEYS] {name}: public {public}, secret {secret} (mode 600, keep it private)")
        if name == "learner":
            print(f"       learner: --transport.curve-server-secret {secret} --transport.curve-authorized-dir ALLOWED_DIR")
            print(f"       actors:  --transport.curve-server-public {public}")
        else:
            allowed = os.path.join(cfg.authorize, os.path.basename(public)) if cfg.authorize else ""
            print(f"       actor:   --transport.curve-client-secret {secret} --transport.curve-server-public LEARNER.key")
            admits = f"copied to {allowed}" if allowed else f"copy {public} into its ALLOWED_DIR"
            print(f"       learner admits it: {admits}")
    print("Sockets bind to loopback unless --transport.host says otherwise; any other host requires these keys.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
