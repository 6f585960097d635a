"""The error a bad configuration value raises, and the checks that raise it.

Kept apart from shared/config.py so env modules (shared/envs/) can check their own options without
importing the configuration that nests them.
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
