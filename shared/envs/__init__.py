"""Environments as registered plug-ins: one module per env, one registry.

Every env is an :class:`EnvEntry`: how to build one actor's envs, its spec, action names, what its *score* and
*success* mean and the values the auto settings take on it. Adding one (a module calling :func:`register`, a line in
:data:`BUILTIN`, or ``--env.module`` for a plug-in) is described in docs/environments.md.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.config import AUTO, ENV_AUTO_FIELDS, EnvConfig, from_dict
from shared.errors import ConfigError
from shared.spec import EnvSpec, VectorEnv

T = TypeVar("T")

BUILTIN: dict[str, str] = {
    "mario": "shared.envs.mario",
    "catch": "shared.envs.catch",
    "fake": "shared.envs.fake",
    "snake": "shared.envs.snake",
    "fuelbreak": "shared.envs.fuelbreak",
    "gym": "shared.envs.gymnasium_env",
}
"""Env name -> the module that registers it (imported on first use: no process pays for an emulator it does not run)."""


@dataclass(frozen=True)
class EnvEntry:
    """What the rest of warppipe needs to know about one env; every callable takes the run's EnvConfig."""

    name: str
    spec: Callable[[EnvConfig], EnvSpec]
    """The observation and action space, without starting an env."""
    make: Callable[[EnvConfig, Sequence[int]], VectorEnv]
    """The ``len(seeds)`` envs of one actor, built in the calling process (never pickled)."""
    action_names: Callable[[EnvConfig], list[str]]
    """Readable action names, in action order (``"right+A"``)."""
    make_single: Callable[[EnvConfig, int], Any] | None = None
    """Frame envs only: one env (shared/envs/frames.py ``FrameEnv``), for the evaluator and the benchmark."""
    options_type: type | None = None
    """The dataclass of the env's own options (``--env.<name>.<option>``); its ``validate()``, if any, raises ConfigError."""
    stage: Callable[[EnvConfig, str], EnvConfig] | None = None
    """A copy of the config playing another level of the game (``eval.stage``; Mario: '1-2'); None: one level."""
    label: Callable[[EnvConfig], str] | None = None
    """What a run played, in a word or two for headers and file names (Mario: its stage); default: the name."""
    options: Callable[[EnvConfig], str] | None = None
    """The env's own options that change what the agent plays, in a few words for the run header; default: none."""
    score: str = "score"
    """What ``info["score"]`` measures, for console lines (Mario: Distance, the episode's furthest x_pos)."""
    success: str = "success"
    """What ``info["success"]`` means, for console lines (Mario: Flags)."""
    random_reference: bool = False
    """In-training evaluations also play the random policy on the same seeds, to read a score against."""
    video: bool = False
    """An episode can be filmed from its actions (shared/evaluation/video.py ``record_video``: Mario's emulator screen)."""
    states: bool = False
    """Its single envs save and restore their state (``save_state() -> state``, ``restore_state(state) -> frame``, as
    ALE's cloneState/restoreState): drills and training starts need it (docs/environments.md)."""
    hazards: Callable[[EnvConfig], Sequence[tuple[str, float, float]]] | None = None
    """Where episodes of this level end, as ``(name, lo, hi)`` score ranges in order (shared/evaluation/hazards.py gives
    each one's pass rate); None or empty: a histogram of end scores instead."""
    noop_action: Callable[[EnvConfig], int] | None = None
    """The action that does nothing, played at the start of a no-op-start evaluation episode; None: action 0."""
    probe_action: Callable[[EnvConfig], int] | None = None
    """The action the probe set's scripted policy holds (shared/probe_set.py; Mario: right+A); None: a seeded random policy."""
    # The values the options of the same name (ENV_AUTO_FIELDS) take at -1 (auto) on this env:
    reward_scale: float = 1.0
    gamma: float = 0.9
    max_episode_steps: int = 4500
    """The episode cap in agent steps (0: none)."""
    envs_per_actor: int = 1
    eps_anneal_env_steps: int = 100_000
    """The run's env steps of the exploration anneal: 25,000 steps of each env with the default 4 actors of one env."""
    target_sync_env_steps: int = 2_000
    broadcast_env_steps: int = 1_600
    rule: str = "double"
    """learner.rule's word: 'double' or 'munchausen' (shared/targets.py RULES)."""
    munchausen_alpha: float = 0.9
    total_env_steps: int = 0
    """The budget a run on the defaults trains for (0: until stopped)."""

    def label_of(self, cfg: EnvConfig) -> str:
        return self.label(cfg) if self.label is not None else self.name

    def hazards_of(self, cfg: EnvConfig) -> list[tuple[str, float, float]]:
        """``cfg``'s hazard clusters (``hazards``); empty: none."""
        return [(str(n), float(lo), float(hi)) for n, lo, hi in self.hazards(cfg)] if self.hazards is not None else []

    def noop_of(self, cfg: EnvConfig) -> int:
        """``cfg``'s no-op action (``noop_action``; 0 when the env names none)."""
        return int(self.noop_action(cfg)) if self.noop_action is not None else 0


_REGISTRY: dict[str, EnvEntry] = {}


def register(entry: EnvEntry) -> EnvEntry:
    """Add ``entry`` (an env's module calls this when imported); a second env of the same name is an error."""
    reserved = {f.name for f in dataclasses.fields(EnvConfig)}
    if entry.name in reserved:  # its options would share a key with an option every env has (config.json's env)
        raise ValueError(f"env name {entry.name!r} is an option of every env; choose another name")
    old = _REGISTRY.get(entry.name)
    if old is not None and old is not entry:
        raise ValueError(f"env {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry
    return entry


def names() -> list[str]:
    """The built-in env names, then any registered from outside, in registration order."""
    return list(BUILTIN) + [n for n in _REGISTRY if n not in BUILTIN]


def entry_for(cfg: EnvConfig | str) -> EnvEntry:
    """The entry of ``cfg.name`` (or of a name): imports ``cfg.module`` first (a plug-in that registers it), then
    the built-in module of that name. ConfigError names an unknown env or a plug-in that does not import."""
    name, module = (cfg, "") if isinstance(cfg, str) else (cfg.name, cfg.module)
    if module:  # always, also for a name already known: a module that does not import is an error either way
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"env.module={module!r} does not import ({exc})") from None
    if name not in _REGISTRY and isinstance(name, str) and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        where = f" (env.module={module!r} did not register it)" if module else ""
        raise ConfigError(f"env.name={name!r} must be one of {', '.join(map(repr, names()))}{where}") from None


def options_types() -> dict[str, type]:
    """Env name -> its options dataclass, for every built-in env (:data:`BUILTIN`'s order) and plug-in registered so far."""
    for module in BUILTIN.values():
        importlib.import_module(module)
    entries = [_REGISTRY[name] for name in names()]  # BUILTIN's order, then plug-ins': the same on every import order
    return {entry.name: entry.options_type for entry in entries if entry.options_type is not None}


def options(cfg: EnvConfig, name: str, kind: type[T]) -> T:
    """Env ``name``'s own options in ``cfg`` as its ``kind`` dataclass (config.json's dict is built into one; an
    unknown key is a ConfigError naming it); ``kind()``, the env's defaults, when ``cfg`` holds none."""
    value = cfg.options.get(name)
    if value is None:
        return kind()
    if isinstance(value, kind):
        return value
    if isinstance(value, dict):
        return from_dict(kind, value)
    raise ConfigError(f"env.{name}={value!r} must be the options of env {name!r} ({kind.__name__})")


def with_stage(cfg: EnvConfig, stage: str) -> EnvConfig:
    """A copy playing level ``stage`` (the evaluations' eval.stage); empty: ``cfg`` itself. ConfigError for an env
    with one level or a stage it does not have."""
    if not stage:
        return cfg
    entry = entry_for(cfg)
    if entry.stage is None:
        raise ConfigError(f"eval.stage={stage!r}: env {cfg.name!r} has one level (leave eval.stage empty)")
    try:
        return entry.stage(cfg, stage)
    except ConfigError as exc:
        raise ConfigError(f"eval.stage={stage!r}: {exc}") from None


def check_env(cfg: EnvConfig) -> tuple[EnvEntry, EnvConfig]:
    """Check ``cfg``'s shared options, that its options name known envs, and the env's own (ConfigError names the first bad
    value); returns the entry and ``cfg`` with the env's options as its dataclass and its auto episode cap resolved."""
    entry = entry_for(cfg)
    autos = {key: getattr(entry, key) for key in ENV_AUTO_FIELDS["env"] if getattr(cfg, key) == AUTO}
    cfg = dataclasses.replace(cfg, **autos) if autos else cfg
    cfg.validate()
    known = set(names())
    if unknown := sorted(set(cfg.options) - known):
        raise ConfigError(f"env.{unknown[0]}: options for an env that is not registered (known: {', '.join(sorted(known))})")
    if entry.options_type is not None:
        own: Any = options(cfg, entry.name, entry.options_type)
        if hasattr(own, "validate"):
            own.validate()
        cfg = dataclasses.replace(cfg, options={**cfg.options, entry.name: own})
    return entry, cfg


def env_spec(cfg: EnvConfig) -> EnvSpec:
    """The observation and action space of the env ``cfg`` describes (ConfigError names a bad value)."""
    entry, cfg = check_env(cfg)
    return entry.spec(cfg)


def make_vector_env(cfg: EnvConfig, seeds: Sequence[int]) -> VectorEnv:
    """The ``len(seeds)`` envs of one actor, built here. Frame envs: env e is seeded with ``seeds[e]``; vector
    envs (Snake, fuel breaks) take ``seeds[0]`` and derive each env's stream from it and its index."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("make_vector_env needs at least one seed (one per env)")
    entry, cfg = check_env(cfg)
    return entry.make(cfg, seeds)


def make_env(cfg: EnvConfig, seed: int) -> Any:
    """One frame env (shared/envs/frames.py ``FrameEnv``) built here; ConfigError for an env that has none."""
    entry, cfg = check_env(cfg)
    if entry.make_single is None:
        raise ConfigError(f"env.name={cfg.name!r} is a vector env; it has no single-env form (use make_vector_env)")
    return entry.make_single(cfg, seed)


def action_names(cfg: EnvConfig) -> list[str]:
    """Readable action names of the env, in action order."""
    return list(entry_for(cfg).action_names(cfg))


def env_label(cfg: EnvConfig) -> str:
    """What a run plays, for headers and file names: Mario's stage ('1-1'), else the env's name."""
    return entry_for(cfg).label_of(cfg)


def frame_entry(
    name: str, make_single: Callable[[EnvConfig, int], Any], action_names: Callable[[EnvConfig], list[str]], **fields: Any
) -> EnvEntry:
    """The entry of an env of single uint8 frames (``env.frame_size`` square, stacked ``env.stack`` deep,
    unmasked), stepped side by side in a shared/envs/frames.py ``FrameVectorEnv``."""

    def spec(cfg: EnvConfig) -> EnvSpec:
        return EnvSpec((cfg.frame_size, cfg.frame_size), "uint8", cfg.stack, len(action_names(cfg)), masked=False)

    def make(cfg: EnvConfig, seeds: Sequence[int]) -> VectorEnv:
        from shared.envs.frames import FrameVectorEnv

        return FrameVectorEnv([make_single(cfg, s) for s in seeds], spec(cfg))

    return EnvEntry(name=name, spec=spec, make=make, action_names=action_names, make_single=make_single, **fields)
