"""The command lines of warppipe's programs, all parsed by tyro.

EnvConfig holds env options in one dict, but tyro needs a field per option: the types it parses are built from the env
registry after ``--env.module`` (a plug-in) is imported, so every env's options are flags (``--env.mario.stage 1-2``),
and :func:`plain` turns what tyro returns back into a plain config, its env options under ``env.options``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import tyro

from launch.saved_config import new_run_from
from shared.config import ConfigError, EnvConfig, RunConfig, flatten
from shared.envs import options, options_types

T = TypeVar("T")


class UsageError(Exception):
    """Bad input to a program: said in one line on stderr (``error: ...``), exit status 2."""


def parse(kind: type[T], argv: Sequence[str] | None, prog: str, description: str | None = None) -> T:
    """``kind`` (a dataclass) filled from ``argv`` by tyro; a value tyro rejects raises UsageError, its message in one line.
    ``prog`` is the command ``--help``'s usage line names (``python -m launch.keys``): left to tyro, that line would
    name the path of the script run (``/home/.../launch/keys.py``), which nobody types."""
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


def subclass(kind: type, fields: list[Any]) -> type:
    """``kind`` with ``fields`` (name, type, default factory) added or retyped, its docstring kept (tyro prints it)."""
    spec = [(name, field_type, dataclasses.field(default_factory=factory)) for name, field_type, factory in fields]
    typed = dataclasses.make_dataclass(kind.__name__, spec, bases=(kind,))
    typed.__doc__ = kind.__doc__
    return typed


def env_config_type() -> type:
    """EnvConfig as tyro parses it: one nested field per env that has options (built in and registered)."""
    fields: list[Any] = [("options", tyro.conf.Suppress[dict[str, Any]], dict)]
    return subclass(EnvConfig, fields + [(name, kind, kind) for name, kind in options_types().items()])


def with_env_options(kind: type, env: EnvConfig | None = None) -> type:
    """``kind`` with its ``env`` field as :func:`env_config_type`, the flags defaulting to ``env``'s values (None: defaults)."""
    env_type = env_config_type()
    factory: Any = env_type
    if env is not None:
        shared = {f.name: getattr(env, f.name) for f in dataclasses.fields(EnvConfig) if f.name != "options"}
        own: dict[str, Any] = {name: options(env, name, options_type) for name, options_type in options_types().items()}
        factory = functools.partial(env_type, **shared, **own)
    return subclass(kind, [("env", env_type, factory)])


def run_config_type() -> type:
    """RunConfig as tyro parses it: ``env`` with one nested field per env that has options (built in and registered)."""
    return with_env_options(RunConfig)


def plain(parsed: Any, kind: type = RunConfig) -> Any:
    """The ``kind`` of a parsed :func:`with_env_options` type: each env's options moved into ``env.options``."""
    env = parsed.env
    base = {f.name: getattr(env, f.name) for f in dataclasses.fields(EnvConfig)}
    base["options"] = {name: getattr(env, name) for name in options_types() if hasattr(env, name)}
    fields = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(kind)}
    return kind(**{**fields, "env": EnvConfig(**base)})


def parse_run_config(argv: Sequence[str], description: str | None = None, prog: str = "python -m launch.local") -> RunConfig:
    """The RunConfig a command line asks for, not yet resolved; the plug-in ``--env.module`` names is imported first.
    ``prog`` is the command ``--help``'s usage line names (as :func:`parse`'s), not the path of the script run."""
    argv = list(argv)
    load_plugin(argv)
    return plain(tyro.cli(run_config_type(), args=argv, prog=prog, description=description))


@dataclass(frozen=True)
class LaunchCommand:
    """A launcher's command line (launch.local, launch.learner): the run it asks for and which options it gave."""

    cfg: RunConfig
    """The run, not yet resolved: ``--config``'s saved run with the command line's options over it, else the command line's."""
    given: frozenset[str]
    """The dotted names of the options the command line gave (:func:`given_options`)."""
    print_config: bool
    """``--print-config``: print the resolved config (launch/resolved_config.py) and start nothing."""


RENAMED_RUN_OPTIONS = {
    flag: "--actor.eps-anneal-env-steps, the run's env steps (each env's steps x actors x envs per actor)"
    for flag in ("--actor.eps-anneal-steps", "--actor.eps_anneal_steps")
}
"""A launcher's options that were renamed (old spelling -> new): refused, naming the new form."""


def parse_launch(argv: Sequence[str], description: str | None = None, prog: str = "python -m launch.local") -> LaunchCommand:
    """A launcher's command line: ``--config PATH`` (launch/saved_config.py) and ``--print-config`` taken out, the rest
    parsed as a RunConfig; a renamed option or a ``--config`` that names no run's config raises ConfigError naming it."""
    try:
        refuse_renamed(argv, RENAMED_RUN_OPTIONS)
    except UsageError as exc:
        raise ConfigError(str(exc)) from None
    path, rest = take_option(argv, "--config")
    printing = "--print-config" in rest
    rest = [arg for arg in rest if arg != "--print-config"]
    if "--config" in rest:
        raise ConfigError("--config needs a value: a run folder or its config.json")
    cfg = parse_run_config(rest, description, prog)
    given = given_options(rest, cfg)
    if path is not None:  # the --config line goes to stderr beside --print-config's JSON
        cfg = new_run_from(path, cfg, given, functools.partial(print, file=sys.stderr if printing else sys.stdout, flush=True))
    return LaunchCommand(cfg, given, printing)


def given_options(argv: Sequence[str], cfg: RunConfig) -> frozenset[str]:
    """The dotted names of ``cfg``'s options that ``argv`` (which tyro parsed into ``cfg``) gives, at their default or
    not: ``--transport.base-port 5600`` and ``--actors=4`` give ``transport.base_port`` and ``actors``, ``--no-progress``
    gives ``progress``. tyro does not say which options it was given (brentyi/tyro#254), so the flags are read here."""
    known = flatten(json.loads(cfg.to_json()))
    given: set[str] = set()
    for arg in argv:
        if not arg.startswith("--"):
            continue  # a value: tyro accepted argv, so every option in it is a flag of its own
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        *owners, field = name.split(".")
        if name not in known and field.startswith("no_"):  # a boolean's negation: --learner.no-exact-ratio
            name = ".".join([*owners, field.removeprefix("no_")])
        if name in known:
            given.add(name)
    return frozenset(given)


def take_option(argv: Sequence[str], flag: str) -> tuple[str | None, list[str]]:
    """The value of ``flag`` in ``argv`` (the last one wins) and ``argv`` without it: a program's own option whose name
    a RunConfig section takes too (``launch.actor --learner HOST:PORT`` beside ``--learner.lr``)."""
    value, rest, args = None, [], iter(argv)
    for arg in args:
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        elif arg == flag and (following := next(args, None)) is not None:
            value = following
        else:
            rest.append(arg)
    return value, rest


def refuse_renamed(argv: Sequence[str], renamed: dict[str, str]) -> None:
    """UsageError for the first option of ``argv`` that ``renamed`` maps (old spelling -> new), naming the new form."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in renamed:
            raise UsageError(f"{flag} is now {renamed[flag]}")


def load_plugin(argv: Sequence[str]) -> None:
    """Import the plug-in ``--env.module`` names in ``argv``; one that does not import exits with the error (status 2)."""
    try:
        import_plugin(plugin_module(argv))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
