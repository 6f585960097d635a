"""Where a run starts: a new run, or a run folder resumed (``--resume RUN`` or ``latest``) with its own config,
the options a resume may change taken from the command line where it gives them (at their default too) and every
other given option named as kept."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Collection

from learner.checkpoint import checkpoint_mismatch, checkpoint_mtime, has_checkpoint, load_resume_state
from shared.config import ConfigError, RunConfig, flatten
from shared.config_migration import read_config
from shared.evaluation.result import RESULT_NAME
from shared.network import build_q_network
from shared.resolution import Resolved, resolve_run

# Options a resumed run always takes from the command line.
RESUME_OVERRIDES = ("duration", "log_every", "progress", "resume", "spawn_actors")
# Options a resumed run takes from the command line when it gives them: the slots (Compose's WARPPIPE_SLOTS), where
# it listens and with which keys. A new slot count changes the replay's layout: a saved replay is then not used.
RESUME_CHANGES = (
    "actors",
    "transport.host",
    "transport.base_port",
    "transport.curve_server_secret",
    "transport.curve_client_secret",
    "transport.curve_server_public",
    "transport.curve_authorized_dir",
    "transport.open_loopback",
)
# Budgets of the whole run: a resume keeps the saved one unless the command line gives one (0: none; auto: the env's).
RESUME_BUDGETS = ("total_env_steps", "learner.steps")
FINDS_THE_RUN = ("run_dir",)  # given with --resume latest to say where the run is, not to change it


def resumed_config(cli: RunConfig, given: Collection[str] | None = None) -> RunConfig:
    """The run folder's saved config with the options a resume may change taken from the command line where it gives
    them, each change named in one line; every other option it gives that the run holds otherwise is named as kept in
    another. ``given``: the dotted names the command line gave, at their default or not (launch.cli.given_options);
    None, a config built in code: those that differ from their defaults."""
    path = os.path.join(cli.resume, "config.json")
    if not os.path.exists(path):
        raise ConfigError(f"resume={cli.resume!r} is not a run folder (no config.json)")
    with open(path) as fh:
        saved = read_config(fh.read())
    values, kept = (flatten(json.loads(c.to_json())) for c in (cli, saved))
    if given is None:
        defaults = flatten(json.loads(RunConfig().to_json()))
        given = {name for name, value in values.items() if value != defaults.get(name)}
    for name in RESUME_OVERRIDES:
        setattr(saved, name, getattr(cli, name))
    taken: list[str] = []  # what the resume changes
    ignored: list[str] = []  # what it keeps though given
    for name, value in values.items():  # in config.json's order, so each line reads the same every time
        if name not in given or name in RESUME_OVERRIDES or name in FINDS_THE_RUN or value == kept.get(name):
            continue  # not given, always taken, or the run's own value: nothing to change or say
        said = f"--{name.replace('_', '-')} {value!r} (the run's: {kept.get(name)!r})"
        if name in RESUME_CHANGES or name in RESUME_BUDGETS:
            *owners, field = name.split(".")
            setattr(functools.reduce(getattr, owners, saved), field, value)
            taken.append(said)
        else:
            ignored.append(said)
    if taken:
        print(f"[MAIN] --resume takes from the command line: {', '.join(taken)}", flush=True)
    if ignored:
        print(f"[MAIN] --resume keeps the run's own settings, not those given: {', '.join(ignored)}", flush=True)
    return saved


def latest_run(run_dir: str) -> str:
    """The newest folder under ``run_dir`` holding a checkpoint, or '' when there is none."""
    runs = [os.path.join(run_dir, name) for name in (os.listdir(run_dir) if os.path.isdir(run_dir) else [])]
    runs = [run for run in runs if has_checkpoint(run) and os.path.isfile(os.path.join(run, "config.json"))]
    return max(runs, key=checkpoint_mtime, default="")


def starting_point(cfg: RunConfig, given: Collection[str] | None = None) -> tuple[RunConfig, dict | None]:
    """The config to run and the checkpoint it continues: ``--resume``'s (``latest``: the newest run under ``--run-dir``
    with a checkpoint, else a new one) with the options a resume may change (``given``: :func:`resumed_config`'s);
    without it, the command line's and None."""
    latest = cfg.resume == "latest"
    if latest:  # a restarted container continues its run; the first start begins one
        cfg.resume = latest_run(cfg.run_dir)
        found = (
            f"continuing {cfg.resume}" if cfg.resume else f"no run with a checkpoint under {cfg.run_dir!r}; starting a new one"
        )
        print(f"[MAIN] --resume latest: {found}", flush=True)
    if not cfg.resume:
        return cfg, None
    try:
        resume_state = load_resume_state(cfg.resume) if os.path.isfile(os.path.join(cfg.resume, "config.json")) else None
    except (FileNotFoundError, ValueError) as exc:  # ValueError: neither checkpoint.pt nor checkpoint.prev.pt can be read
        if not latest or isinstance(exc, FileNotFoundError):
            raise ConfigError(f"resume={cfg.resume!r}: {exc}") from None
        print(f"[MAIN] --resume latest: {exc}; starting a new run (that folder is left as it is)", flush=True)
        cfg.resume = ""
        return cfg, None
    return resumed_config(cfg, given), resume_state


def resolved_start(cli: RunConfig, given: Collection[str] | None = None) -> tuple[Resolved, dict | None]:
    """The run resolved and the checkpoint it continues from (``given``: :func:`resumed_config`'s). A checkpoint this
    release cannot load: ``--resume RUN`` exits 2 on it, ``--resume latest`` starts a new run beside it (a restarted
    container must not loop on it)."""
    latest, fresh = cli.resume == "latest", dataclasses.replace(cli, resume="")
    cfg, resume_state = starting_point(cli, given)
    ready = resolve_run(cfg, fresh=not cfg.resume)
    if resume_state is None:
        return ready, None
    why = checkpoint_mismatch(resume_state, build_q_network(ready.spec, dueling=ready.cfg.net.dueling))
    if not why:
        return ready, resume_state
    if not latest:
        raise ConfigError(f"resume={cfg.resume!r}: its checkpoint does not fit this release's network ({why})")
    print(
        f"[MAIN] --resume latest: {cfg.resume}'s checkpoint does not fit this release's network ({why}); "
        "starting a new run (that folder is left as it is)",
        flush=True,
    )
    return resolve_run(fresh, fresh=True), None


def finished_line(cfg: RunConfig, resume_state: dict | None, run_dir: str) -> str:
    """A line saying the run in ``run_dir`` is finished: it continues from a checkpoint at or past its budget (as given
    now: a larger ``--total-env-steps`` or ``--learner.steps`` continues it) and its final evaluation was written.
    Empty otherwise. A restarted learner then exits 0 instead of evaluating the same run again."""
    if resume_state is None or not os.path.isfile(os.path.join(run_dir, RESULT_NAME)):
        return ""
    c = resume_state["counters"]
    if cfg.total_env_steps and c["inserted"] >= cfg.total_env_steps:
        budget = f"{c['inserted']:,} of --total-env-steps {cfg.total_env_steps:,} env steps"
    elif cfg.learner.steps and c["updates"] >= cfg.learner.steps:
        budget = f"{c['updates']:,} of --learner.steps {cfg.learner.steps:,} updates"
    else:
        return ""
    return (
        f"[MAIN] {run_dir} is finished ({budget}; its final evaluation is {RESULT_NAME}): nothing to do "
        "(a larger budget continues it)"
    )
