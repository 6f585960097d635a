"""The values a start would run with, every auto filled in, printed as JSON (``--print-config``); nothing is started.

The document has config.json's layout with the env's autos (shared/resolution.py), the device's (batch,
accumulation, the learner's threads and AMP) and the run's (the seed, the priority exponent's span) filled in, so
``--config FILE`` starts a run on it. A negative ``actor.epsilon`` selects the annealing schedule (no auto to fill):
it reads ``"schedule"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Collection

from launch.resume import resolved_start
from launch.saved_config import SCHEDULE
from learner.trainer import resolve_amp
from shared.config import RunConfig
from shared.cpus import learner_threads
from shared.resolution import Resolved


def resolved_document(ready: Resolved) -> dict:
    """``ready``'s config as config.json holds it, with the device's and the run's autos filled in too."""
    cfg, learner = ready.cfg, ready.learner  # learner: the device's batch and accumulation filled
    data = json.loads(cfg.to_json())
    amp = learner.amp if resolve_amp(learner.amp, ready.device) is not None else "off"  # auto: full precision
    threads = learner_threads(learner.threads, cfg.actors if cfg.spawn_actors else 0)  # as launch/local.py sets them
    data["learner"] = {**dataclasses.asdict(learner), "amp": amp, "threads": threads}
    data["device"] = str(ready.device)
    data["replay"]["priority_beta_steps"] = cfg.replay.beta_steps(cfg.total_env_steps)
    if cfg.actor.epsilon < 0:
        data["actor"]["epsilon"] = SCHEDULE
    return data


def print_config(cli: RunConfig, given: Collection[str] | None = None) -> int:
    """Print the resolved document of the run ``cli`` asks for (``--resume``'s too: its folder is read, nothing is
    written) on stdout, and what resolving says on stderr; 0. ``given``: launch.resume's."""
    with contextlib.redirect_stdout(sys.stderr):  # a resume's lines: stdout holds the JSON alone
        ready, _ = resolved_start(cli, given)
    seed = ready.cfg.seed
    if cli.seed < 0 and not ready.cfg.resume:
        print(f"[MAIN] seed {seed} drawn for this print (a run draws its own; --seed {seed} repeats it)", file=sys.stderr)
    print(json.dumps(resolved_document(ready), indent=2, sort_keys=True), flush=True)
    return 0
