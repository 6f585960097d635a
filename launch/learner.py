"""The learner alone, for actors on other hosts or in other containers (``launch.actor``).

    python -m launch.learner --actors 8 --transport.host 0.0.0.0 \\
        --transport.curve-server-secret keys/learner.key_secret --transport.curve-authorized-dir keys/actors

``launch.local --no-spawn-actors``: it binds the ``--actors`` slots and hands free ones to actors that ask;
``--resume latest`` lets a restarted container pick up its run; ``--config`` and ``--print-config`` as launch.local's
(``--print-config`` waits for no key file). ``WARPPIPE_ARGS`` (flags, split like a shell line) come before the
command line's; it waits ``WARPPIPE_KEY_WAIT`` seconds for CURVE key files still being written.
"""

from __future__ import annotations

import os
import shlex
import sys

from launch.cli import parse_launch
from launch.exits import StopSignals, exit_code
from launch.local import run
from launch.resolved_config import print_config
from shared.wire.curve import key_wait, wait_for_key_files


def main(argv: list[str] | None = None) -> int:
    signals = StopSignals().install()
    argv = shlex.split(os.environ.get("WARPPIPE_ARGS", "")) + list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        # WARPPIPE_ARGS's options count as given, as the command line's
        command = parse_launch(argv, description=__doc__, prog="python -m launch.learner")
        cfg, given = command.cfg, command.given
        cfg.spawn_actors = False
        if command.print_config:
            return print_config(cfg, given)
        wait_for_key_files(cfg.transport, key_wait(), signals.stopping.is_set)
        if signals.stopping.is_set():
            print("[MAIN] a stop signal before the run began: nothing was started", flush=True)
            return 0
        return run(cfg, signals, given)

    return exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
