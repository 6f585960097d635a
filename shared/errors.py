"""The error a bad configuration value raises, and the checks that raise it.

Kept apart from shared/config.py so env modules (shared/envs/) check their options without importing the config.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and the value."""


def check(ok: bool, name: str, value: Any, rule: str) -> None:
    """Raise ConfigError ``"{name}={value!r} {rule}"`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{name}={value!r} {rule}")


def is_int(x: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def check_range(obj: Any, name: str, low: float, high: float, rule: str, *, integer: bool = True, auto: Any = None) -> None:
    """:func:`check` that field ``name`` of ``obj`` (its last dotted part) is in [low, high] (an int, with ``integer``),
    or equals ``auto`` when that is given."""
    value = getattr(obj, name.rpartition(".")[2])
    check((not integer or is_int(value)) and ((auto is not None and value == auto) or low <= value <= high), name, value, rule)
