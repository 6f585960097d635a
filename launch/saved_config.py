"""A new run on a saved run's settings (``launch.local --config RUN``): its config.json, any earlier layout, with the
options the command line gives laid over it.

The saved seed is kept, so the new run repeats the saved one unless the command line gives ``--seed`` (``--seed -1``
draws a fresh one); the component seeds that followed the saved run's seed follow the new one. A saved run's
``--resume`` is dropped (this is a new run), and how this invocation runs (progress bar, spawning actors) is the
command line's. With another ``--env.name`` the env autos the saved run took from its env go back to auto.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Collection
from typing import Any

from shared.config import AUTO, ENV_AUTO_FIELDS, SEEDED_SECTIONS, ConfigError, RunConfig, flatten
from shared.config_migration import read_config
from shared.envs import entry_for

SCHEDULE = "schedule"
"""``actor.epsilon`` as ``--print-config`` writes its negative (the annealing schedule, no auto); read back as -1."""
INVOCATION = ("resume", "progress", "spawn_actors")  # how this start runs: always the command line's
SECTIONS = ("env", "actor", "learner")  # what every run's config.json holds, whatever its layout


def config_file(path: str) -> str:
    """The config.json ``path`` names: the file itself, or a run folder's (ConfigError naming ``path`` otherwise)."""
    if os.path.isdir(path):
        file = os.path.join(path, "config.json")
        if not os.path.isfile(file):
            raise ConfigError(f"config={path!r} is a folder without config.json (not a run folder)")
        return file
    if not os.path.isfile(path):
        raise ConfigError(f"config={path!r} does not exist (give a run folder or its config.json)")
    return path


def read_saved(path: str) -> RunConfig:
    """The config saved at ``path`` (a run folder or its config.json; an earlier layout or a ``--print-config``
    document too); ConfigError naming ``path`` when it holds no run's configuration."""
    file = config_file(path)
    not_config = f"config={path!r} is not a run's config.json"
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8 text
        raise ConfigError(f"{not_config} ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(name), dict) for name in SECTIONS):
        raise ConfigError(f"{not_config} (no {', '.join(SECTIONS)} sections)")
    if data["actor"].get("epsilon") == SCHEDULE:
        data["actor"] = {**data["actor"], "epsilon": -1.0}
    try:
        return read_config(json.dumps(data))
    except ConfigError as exc:
        raise ConfigError(f"config={path!r}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:  # a section of the wrong kind
        raise ConfigError(f"{not_config} ({exc})") from None


def new_run_from(path: str, cli: RunConfig, given: Collection[str], echo: Callable[[str], Any] = print) -> RunConfig:
    """A new run with the settings saved at ``path``, the options the command line gave (``given``: their dotted
    names, at their default too, launch.cli.given_options; values from ``cli``) over them; the changes said in one line."""
    if cli.resume:
        raise ConfigError(
            f"resume={cli.resume!r}: --config starts a new run on a saved run's settings, --resume continues a run; give one"
        )
    cfg = read_saved(path)
    values, saved = flatten(json.loads(cli.to_json())), flatten(json.loads(cfg.to_json()))
    changed = [
        f"--{n.replace('_', '-')} {values[n]!r} (saved: {saved.get(n)!r})"
        for n in sorted(set(given) - {"seed"})
        if values[n] != saved.get(n)
    ]
    if "env.name" in given and cli.env.name != cfg.env.name:
        _autos_follow_the_env(cfg, given)
    if "seed" in given:
        for section in SEEDED_SECTIONS:  # those that followed the saved run's seed follow the new one
            if f"{section}.seed" not in given and getattr(cfg, section).seed == cfg.seed:
                getattr(cfg, section).seed = AUTO
    for name in sorted({*given, *INVOCATION}):
        _set(cfg, name, values[name])
    seed = f"--seed {cli.seed}" if "seed" in given else f"the saved seed {cfg.seed} (--seed sets another)"
    echo(f"[MAIN] --config {path}: a new run on its settings, {seed}" + (f"; given: {', '.join(changed)}" if changed else ""))
    return cfg


def _set(cfg: RunConfig, name: str, value: Any) -> None:
    """Option ``name`` (dotted, as given_options names it) of ``cfg`` to ``value``; an env's own options (``env.NAME.KEY``)
    as config.json holds them, in ``env.options``."""
    *owners, key = name.split(".")
    if len(owners) == 2 and owners[0] == "env":
        own: Any = cfg.env.options.get(owners[1]) or {}
        own = dataclasses.asdict(own) if dataclasses.is_dataclass(own) and not isinstance(own, type) else dict(own)
        cfg.env.options = {**cfg.env.options, owners[1]: {**own, key: value}}
    else:
        setattr(functools.reduce(getattr, owners, cfg), key, value)


def _autos_follow_the_env(cfg: RunConfig, given: Collection[str]) -> None:
    """The env autos (ENV_AUTO_FIELDS) at the saved env's values back to auto, unless given: a run on another env takes
    that env's reward scale, budget and anneal, not the saved env's."""
    entry = entry_for(cfg.env)  # the saved run's env
    for section, keys in ENV_AUTO_FIELDS.items():
        owner = getattr(cfg, section) if section else cfg
        for key in keys:
            if (f"{section}.{key}" if section else key) not in given and getattr(owner, key) == getattr(entry, key):
                setattr(owner, key, "auto" if isinstance(getattr(owner, key), str) else AUTO)
