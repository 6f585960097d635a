"""The command lines of warppipe's programs, all parsed by tyro.

:func:`parse` reads a program's own arguments (a dataclass whose field docstrings are its ``--help``) and turns tyro's
error box into one :class:`UsageError` line. The programs that take a RunConfig (``launch.local``, ``launch.learner``,
``launch.actor``, the benchmark) parse it with :func:`parse_run_config`: each env's own options appear under its name.

:class:`~shared.config.EnvConfig` holds env options in one dict (``options``); tyro needs a field per option. The
types tyro parses are built here from the env registry, after ``--env.module`` (a plug-in) is imported, so a
plug-in's options are flags like a built-in's (``--env.mario.stage 1-2``, ``--env.my_env.game pong``); what tyro
returns is converted back to a plain RunConfig, its env options under ``env.options``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

import tyro

from shared.config import ConfigError, EnvConfig, RunConfig
from shared.envs import options_types

T = TypeVar("T")


class UsageError(Exception):
    """Bad input to a program: said in one line on stderr (``error: ...``), exit status 2."""


def parse(kind: type[T], argv: Sequence[str] | None, prog: str, description: str | None = None) -> T:
    """``kind`` (a dataclass) filled from ``argv`` by tyro; ``--help`` prints and exits 0 as usual, and a value tyro
    rejects raises UsageError with tyro's message in one line (the flag and the bad value)."""
    caught = io.StringIO()
    try:
        with contextlib.redirect_stderr(caught):
            return tyro.cli(kind, args=list(sys.argv[1:] if argv is None else argv), prog=prog, description=description)
    except SystemExit as exc:
        if not exc.code:
            raise
        raise UsageError(_one_line(caught.getvalue())) from None


def _one_line(box: str) -> str:
    """The message of tyro's error box: its lines without the frame, the title and the pointer to ``--help``."""
    words = []
    for line in box.splitlines()[1:]:  # the first line is the box's title ("Value error")
        text = line.strip().strip("│╭╮╰╯─ ").strip()
        if text.startswith(("For full helptext", "Argument helptext")):
            break
        if text and set(text) - set("─-━ "):
            words.append(text)
    return " ".join(words) or box.strip()


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


def take_option(argv: Sequence[str], flag: str) -> tuple[str | None, list[str]]:
    """The value of ``flag`` in ``argv`` (``FLAG VALUE`` or ``FLAG=VALUE``; the last one wins) and ``argv`` without it:
    a program's own option whose name a RunConfig section already takes (``launch.actor --learner HOST:PORT`` beside
    ``--learner.lr``), read before tyro parses the rest."""
    value, rest, args = None, [], list(argv)
    i = 0
    while i < len(args):
        if args[i] == flag and i + 1 < len(args):
            value, i = args[i + 1], i + 2
            continue
        if args[i].startswith(flag + "="):
            value = args[i].split("=", 1)[1]
        else:
            rest.append(args[i])
        i += 1
    return value, rest


def load_plugin(argv: Sequence[str]) -> None:
    """Import the plug-in ``--env.module`` names in ``argv``; one that does not import exits with the error (status 2)."""
    try:
        import_plugin(plugin_module(argv))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
