"""The command line of every program that takes a RunConfig: each env's own options appear under its name.

:class:`~shared.config.EnvConfig` holds env options in one dict (``options``); tyro needs a field per option. The
types tyro parses are built here from the env registry, after ``--env.module`` (a plug-in) is imported, so a
plug-in's options are flags like a built-in's (``--env.mario.stage 1-2``, ``--env.my_env.game pong``); what tyro
returns is converted back to a plain RunConfig, its env options under ``env.options``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import tyro

from shared.config import ConfigError, EnvConfig, RunConfig
from shared.envs import options_types


def plugin_module(argv: Sequence[str]) -> str:
    """The value of ``--env.module`` in ``argv`` ('' when absent), read before tyro parses anything."""
    for i, arg in enumerate(argv):
        for flag in ("--env.module", "--run.env.module"):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return ""


def import_plugin(module: str) -> None:
    """Import the plug-in ``module`` so that it registers its env (ConfigError when it does not import)."""
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"env.module={module!r} does not import ({exc})") from None


def run_config_type() -> type:
    """RunConfig as tyro parses it: ``env`` with one nested field per env that has options (built in and registered)."""
    env_fields: list[Any] = [("options", tyro.conf.Suppress[dict[str, Any]], dataclasses.field(default_factory=dict))]
    env_fields += [(name, kind, dataclasses.field(default_factory=kind)) for name, kind in options_types().items()]
    env_type = dataclasses.make_dataclass("EnvConfig", env_fields, bases=(EnvConfig,))
    env_type.__doc__ = EnvConfig.__doc__
    run_type = dataclasses.make_dataclass(
        "RunConfig", [("env", env_type, dataclasses.field(default_factory=env_type))], bases=(RunConfig,)
    )
    run_type.__doc__ = RunConfig.__doc__
    return run_type


def plain(parsed: Any) -> RunConfig:
    """The RunConfig of a parsed :func:`run_config_type`: each env's options moved into ``env.options``."""
    env = parsed.env
    base = {f.name: getattr(env, f.name) for f in dataclasses.fields(EnvConfig)}
    base["options"] = {name: getattr(env, name) for name in options_types() if hasattr(env, name)}
    fields = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{**fields, "env": EnvConfig(**base)})


def parse_run_config(argv: Sequence[str], description: str | None = None) -> RunConfig:
    """The RunConfig a command line asks for (not yet resolved: shared/envs ``resolve`` does that). A plug-in named
    by ``--env.module`` is imported first; one that does not import exits with the error (status 2)."""
    argv = list(argv)
    load_plugin(argv)
    return plain(tyro.cli(run_config_type(), args=argv, description=description))


def load_plugin(argv: Sequence[str]) -> None:
    """Import the plug-in ``--env.module`` names in ``argv``; one that does not import exits with the error (status 2)."""
    try:
        import_plugin(plugin_module(argv))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
