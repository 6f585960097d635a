"""One actor as its own program, for other hosts, containers and ``launch.learner``.

    python -m launch.actor --learner 10.0.0.5:5600                     # ask the learner for a free slot
    python -m launch.actor --learner 127.0.0.1:5600 --actor-id 0 --actors 2 --env.name fake

``--learner HOST:PORT``, the learner's address and base port, sets ``--transport.host`` and ``--transport.base-port``.
Without ``--actor-id`` the actor asks the learner for a free slot, so replicas need no setting of their own; every
other flag is launch.local's and must match the learner's. For containers (flags win): ``WARPPIPE_LEARNER``,
``WARPPIPE_ACTOR_ID``, ``WARPPIPE_ARGS`` (more flags, split like a shell line), ``WARPPIPE_KEY_WAIT`` (seconds to wait
for CURVE key files). It keeps playing while the learner is down. Exit codes: 0 on SIGINT or SIGTERM (its report as
one ``[ACTOR] {...}`` JSON line), 2 on a bad setting, 3 when no slot came in ``--actor.slot-wait`` seconds, 4 when the
learner speaks another protocol version (its slot reply or its broadcasts name both versions).
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from actors.collector import actor_main
from launch.cli import parse_run_config, take_option
from launch.exits import StopSignals
from shared.config import ConfigError
from shared.resolution import resolve_run
from shared.wire.curve import key_wait, wait_for_key_files

OWN_OPTIONS = """
The actor's own options, taken out before the rest are parsed (every option listed below them is launch.local's):

    --learner HOST:PORT  the learner's address and base port: sets --transport.host and --transport.base-port
                         (default: WARPPIPE_LEARNER, else those two options)
    --actor-id INT       the actor slot to take, in [0, --actors) (default: WARPPIPE_ACTOR_ID, else a free slot
                         the learner gives)
"""  # --help's section for the two options tyro never sees (the learner's flags share the name --learner)

EXIT_REFUSED = 3
EXIT_VERSION = 4  # the learner's weights are of another protocol version (another release of warppipe)


def parse_learner(address: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); raises ConfigError naming a bad value."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"learner={address!r} must be HOST:PORT (the learner's address and base port, e.g. learner:5600)")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    signals = StopSignals().install()  # kept from the first line: actor_main stops on it
    argv = shlex.split(os.environ.get("WARPPIPE_ARGS", "")) + list(sys.argv[1:] if argv is None else argv)
    raw_id, argv = take_option(argv, "--actor-id")  # the actor's own options; tyro parses the RunConfig's
    learner, argv = take_option(argv, "--learner")
    cfg = parse_run_config(argv, description=__doc__ + OWN_OPTIONS, prog="python -m launch.actor")
    try:
        given = (("--actor-id", raw_id), ("WARPPIPE_ACTOR_ID", os.environ.get("WARPPIPE_ACTOR_ID", "") or None))
        name, raw = next(((name, raw) for name, raw in given if raw is not None), ("", None))  # the flag wins
        if raw is not None and not raw.lstrip("-").isdigit():
            raise ConfigError(f"{name}={raw!r} must be an integer")
        actor_id = None if raw is None else int(raw)
        learner = learner or os.environ.get("WARPPIPE_LEARNER", "")
        if learner:
            cfg.transport.host, cfg.transport.base_port = parse_learner(learner)
        wait_for_key_files(cfg.transport, key_wait(), signals.stopping.is_set)
        if signals.stopping.is_set():
            print("[ACTOR] a stop signal before the actor began: nothing was started", flush=True)
            return 0
        run = resolve_run(cfg, device="cpu")
        if actor_id is not None and not 0 <= actor_id < run.cfg.actors:
            raise ConfigError(f"actor_id={actor_id} must be in [0, actors={run.cfg.actors})")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = actor_main(run, -1 if actor_id is None else actor_id, signals.stopping, standalone=True)
    if report.get("version_skew"):
        print(f"error: the learner speaks another protocol: {report['version_skew']}", file=sys.stderr)
        return EXIT_VERSION
    if report.get("refused"):
        print(f"error: no slot: {report['refused']}", file=sys.stderr)
        return EXIT_REFUSED if report["refused"] != "stopped" else 0
    print("[ACTOR] " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
