"""One actor as its own program, independent of any learner process (e.g. beside ``launch.local --no-spawn-actors``).

    python -m actors.run --actor-id 0 --actors 2 --env.name fake --transport.base-port 5600

Takes ``--actor-id`` plus the run's flags (the same RunConfig as launch.local: slot count, env,
actor and transport settings must match the learner's). It keeps playing while the learner is
down or restarting (ZeroMQ reconnects; staging drops and counts what the learner cannot take)
and exits 0 on SIGINT or SIGTERM, printing its report as one JSON line: ``[ACTOR] {...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

import tyro

from actors.collector import actor_main
from shared.config import ConfigError, RunConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--actor-id", type=int, required=True)
    known, rest = parser.parse_known_args(argv)
    cfg = tyro.cli(RunConfig, args=rest, description=__doc__)
    try:
        cfg.validate()
        if not 0 <= known.actor_id < cfg.actors:
            raise ConfigError(f"actor_id={known.actor_id} must be in [0, actors={cfg.actors})")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = actor_main(cfg, known.actor_id, threading.Event(), standalone=True)
    print("[ACTOR] " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
