"""A run's configuration made ready once per process: the seed drawn, the env's and the device's autos filled, all checked.

What :func:`resolve_run` returns (:class:`Resolved`) is handed down; nothing resolves again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from shared.config import AUTO, AUTOS, ENV_AUTO_FIELDS, SEEDED_SECTIONS, EnvConfig, LearnerConfig, RunConfig
from shared.envs import EnvEntry, check_env, entry_for, with_stage
from shared.errors import ConfigError
from shared.seeding import draw_seed
from shared.spec import EnvSpec


@dataclass(frozen=True)
class Resolved:
    """A ready run: ``cfg`` is what config.json saves (no env auto left, every seed set); ``learner`` is its learner
    section with the device's autos (batch, accumulation) filled for ``device`` as well."""

    cfg: RunConfig
    entry: EnvEntry
    spec: EnvSpec
    device: torch.device
    learner: LearnerConfig


def resolve_device(name: str) -> torch.device:
    """``auto``: the first CUDA device where there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_config(cfg: RunConfig, validate: bool = True) -> RunConfig:
    """``cfg`` with its env autos (:data:`~shared.config.ENV_AUTO_FIELDS`) at the env entry's values, component seeds at
    -1 the run's, then every field checked (``validate`` False: only the env); resolving twice changes nothing."""
    entry, env = check_env(cfg.env)
    if cfg.eval.stage:
        with_stage(env, cfg.eval.stage)
    if cfg.actor.start_share > 0 and not entry.states:
        raise ConfigError(f"actor.start_share={cfg.actor.start_share!r}: env {env.name!r} cannot save its state (use 0)")
    if cfg.eval.drill_trials and not (entry.states and entry.make_single is not None):
        raise ConfigError(
            f"eval.drill_trials={cfg.eval.drill_trials!r} needs an env that saves its state; env.name={env.name!r} does not"
        )
    sections: dict[str, Any] = {"env": env}
    for section in {*ENV_AUTO_FIELDS, *SEEDED_SECTIONS} - {"", "env"}:  # env: check_env above
        owner = getattr(cfg, section)
        changes = {key: getattr(entry, key) for key in ENV_AUTO_FIELDS.get(section, ()) if getattr(owner, key) in AUTOS}
        if section in SEEDED_SECTIONS and owner.seed < 0:
            changes["seed"] = max(cfg.seed, 0)
        sections[section] = dataclasses.replace(owner, **changes)
    run = {key: getattr(entry, key) for key in ENV_AUTO_FIELDS[""] if getattr(cfg, key) == AUTO}
    resolved = dataclasses.replace(cfg, **sections, **run)
    return resolved.validate() if validate else resolved


def resolve_run(cfg: RunConfig, device: str = "", fresh: bool = False) -> Resolved:
    """``cfg`` made ready to run here (:func:`resolve_config`) with its env's entry, spec and learner device settings;
    ``fresh`` draws the seed when it is -1; ``device`` overrides ``cfg.device`` (actors: 'cpu')."""
    if fresh and cfg.seed < 0:
        cfg = dataclasses.replace(cfg, seed=draw_seed())
    cfg = resolve_config(cfg)
    entry = entry_for(cfg.env)
    where = resolve_device(device or cfg.device)
    return Resolved(cfg, entry, entry.spec(cfg.env), where, cfg.learner.resolved(where.type))


def learner_config(cfg: LearnerConfig, env: EnvConfig | str = "", device_type: str = "cpu") -> LearnerConfig:
    """A learner's settings ready for a trainer built on its own (benchmarks, tests): its env autos at ``env``'s
    entry's values (no env: :class:`EnvEntry`'s defaults), its device autos at ``device_type``'s."""
    source: Any = entry_for(env) if env else EnvEntry
    keys = ENV_AUTO_FIELDS["learner"]
    cfg = dataclasses.replace(cfg, **{key: getattr(source, key) for key in keys if getattr(cfg, key) in AUTOS})
    return cfg.resolved(device_type)
