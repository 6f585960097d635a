"""Saved configurations of older versions read in today's layout: moved, renamed, retired and re-defaulted options."""

from __future__ import annotations

import json
from typing import Any

from shared.config import AUTO, RunConfig, from_dict
from shared.errors import ConfigError


def read_config(text: str) -> RunConfig:
    """Parse a saved config (config.json, a checkpoint's copy), older layouts included (:func:`migrate`)."""
    return from_dict(RunConfig, migrate(json.loads(text)))


_MOVED_ENV_KEYS = {key: ("mario", key) for key in ("stage", "actions", "jump_release", "no_progress_steps")} | {
    f"{env}_{key}": (env, key)
    for env, keys in (("snake", ("size", "obs", "hunger", "flood")), ("fuelbreak", ("size", "budget", "ignitions")))
    for key in keys
}
"""Env options that lived flat under ``env`` before each env's options nested under its name."""

_LEGACY_MARIO = {"jump_release": False, "no_progress_steps": 0}
"""Mario options whose default changed after runs were saved without them: the behaviour those runs had."""


def migrate(data: Any) -> Any:
    """A saved configuration (parsed JSON) in today's layout, so older runs resume and evaluate as they were trained:
    options move to where they live now, one a run did not save takes the value its code used, retired ones go."""
    if not isinstance(data, dict):
        return data
    data = {**data}
    env = data.get("env")
    if isinstance(env, dict):
        env = {key: (dict(value) if isinstance(value, dict) else value) for key, value in env.items()}
        flat = any(key in env for key in _MOVED_ENV_KEYS)
        for old, (section, key) in _MOVED_ENV_KEYS.items():
            if old in env:
                env.setdefault(section, {})[key] = env.pop(old)
        if flat or ("mario" not in env and env.get("name", "mario") == "mario"):  # before the nested layout: as it was
            mario = env.setdefault("mario", {})
            for key, value in _LEGACY_MARIO.items():
                mario.setdefault(key, value)
        options = {key: env.pop(key) for key in [k for k, v in env.items() if isinstance(v, dict) and k != "options"]}
        env["options"] = {**env.get("options", {}), **options}  # each env's options, read by shared/envs.options
        data["env"] = env
    if "net" not in data:
        data["net"] = {"dueling": False}
    if isinstance(data.get("learner"), dict):  # runs saved before these options or defaults trained without them
        data["learner"] = {"exact_ratio": False, "munchausen_alpha": 0.0, "samples_per_insert": 8.0, **data["learner"]}
        alpha = data["learner"]["munchausen_alpha"]  # before learner.rule, alpha above 0 chose Munchausen's rule
        data["learner"].setdefault("rule", "auto" if alpha == AUTO else "munchausen" if alpha > 0 else "double")
        data.setdefault("total_env_steps", 0)
    for section, key in _ZERO_WAS_AUTO:
        if isinstance(data.get(section), dict) and data[section].get(key) == 0:
            data[section] = {**data[section], key: AUTO}
    for (section, key), (default, refusal) in _RETIRED.items():
        part = data.get(section)
        if isinstance(part, dict) and key in part:
            if refusal and part[key] != default:
                raise ConfigError(f"{section}.{key}={part[key]!r}: {refusal}")
            data[section] = {name: value for name, value in part.items() if name != key}
    return _anneal_in_run_env_steps(_periods_in_env_steps(data))


def _anneal_in_run_env_steps(data: dict) -> dict:
    """``actor.eps_anneal_steps``, saved in steps of each env before the anneal counted the run's env steps, as the
    run's env steps it spanned: times the run's envs (actors x envs_per_actor), so the run explores as it did. Saved
    as auto, or beside an auto envs_per_actor (configs saved before the resolved config was): the env's run figure."""
    actor = data.get("actor")
    if not isinstance(actor, dict) or "eps_anneal_steps" not in actor:
        return data
    actor = dict(actor)
    per_env, envs = actor.pop("eps_anneal_steps"), actor.get("envs_per_actor", AUTO)
    actors = data.get("actors", RunConfig.actors)
    known = all(isinstance(v, int) and not isinstance(v, bool) for v in (per_env, envs, actors))
    run = per_env * actors * envs if known and per_env >= 0 and envs > 0 else AUTO
    actor.setdefault("eps_anneal_env_steps", run)
    return {**data, "actor": actor}


def _periods_in_env_steps(data: dict) -> dict:
    """A config's periods saved in updates or epochs as the env steps they spanned, ``batch / samples_per_insert`` per update
    (an auto batch as the CPU's 64); with no ratio (0) the period takes today's default (target sync: the env's)."""
    learner, ev = data.get("learner"), data.get("eval")
    if not isinstance(learner, dict) or not (
        {"target_sync", "broadcast_every"} & set(learner) or isinstance(ev, dict) and "every" in ev
    ):
        return data
    learner = dict(learner)
    spi = learner.get("samples_per_insert", 8.0)
    batch = max(learner.get("micro_batch", AUTO), 0) or 64
    batch *= max(learner.get("accum_steps", AUTO), 0) or 1
    per_update = batch / spi if spi and spi > 0 else None
    per_epoch = per_update * learner.get("updates_per_epoch", 20) if per_update else None
    if "target_sync" in learner:
        old = learner.pop("target_sync")
        learner["target_sync_env_steps"] = round(old * per_update) if old > 0 and per_update else AUTO
    if "broadcast_every" in learner:
        old = learner.pop("broadcast_every")
        if per_epoch:
            learner["broadcast_env_steps"] = max(1, round(old * per_epoch))
    data = {**data, "learner": learner}
    if isinstance(ev, dict) and "every" in ev:
        ev = dict(ev)
        old = ev.pop("every")
        if per_epoch or old == 0:
            ev["every_env_steps"] = round(old * (per_epoch or 0))
        data["eval"] = ev
    return data


_ZERO_WAS_AUTO = (
    ("actor", "envs_per_actor"),
    *(("learner", key) for key in ("micro_batch", "accum_steps", "reward_scale", "threads")),
)
"""Options whose auto was 0 before -1 became the one numeric auto."""

_RETIRED: dict[tuple[str, str], tuple[Any, str]] = {
    ("replay", "ending_share"): (0.0, ""),
    ("replay", "ending_steps"): (8, ""),
    ("replay", "ending_reserve"): (2000, ""),
    ("actor", "death_penalty"): (0.0, ""),
    ("actor", "success_bonus"): (0.0, ""),
    ("net", "norm"): (
        "batch",
        "this run used LayerNorm, removed in warppipe after commit f46d2a1; evaluate it with that commit (git checkout f46d2a1)",
    ),
    ("net", "quantiles"): (
        1,
        "this run used a quantile head, removed in warppipe after commit e00ad2c; evaluate it with that commit "
        "(git checkout e00ad2c)",
    ),
    ("learner", "ema_decay"): (0.0, ""),
    ("learner", "bootstrap_epsilon"): (0.0, ""),
    ("learner", "target_polyak"): (False, ""),
    ("learner", "batchnorm_frozen_after"): (0, ""),
    ("actor", "explore_repeat"): (0.0, ""),
    ("actor", "explore_repeat_max"): (10, ""),
    ("learner", "lr_final"): (1.0, ""),
    ("learner", "lr_decay_steps"): (300_000, ""),
    ("learner", "batchnorm"): ("eval", ""),
    ("learner", "augment"): (False, ""),
    ("learner", "n_step_start"): (0, ""),
    ("learner", "n_step_anneal_env_steps"): (5000, ""),
    ("learner", "munchausen_window"): (False, ""),
}
"""Options removed after their screens lost: (section, key) -> (the value that meant off, why a run that set it otherwise
cannot load: set only for an option that changed the network; the others are dropped whatever they held)."""
