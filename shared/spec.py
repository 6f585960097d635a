"""What an environment declares about itself, and the vector-env contract.

Vector envs (:class:`VectorEnv`) follow Gymnasium's with *same-step* auto-reset: ``reset(seed=None)`` returns obs
``[E, *spec.obs_shape]``; ``step(actions [E])`` returns obs, reward float32, terminated and truncated bool (never both)
and ``info``, a dict of [E] arrays with ``"score"`` (float64, the episode's so far) and ``"success"`` (bool). An env
whose episode ended is reset at once: its obs row is the next episode's first (the final one is not returned), its info
read before the reset. ``action_mask()`` (masked specs) is bool [E, num_actions], at least one True per env.
``close()`` is idempotent; returned arrays are fresh (the caller may keep them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

OBS_DTYPES = ("uint8", "int8", "float16", "float32")
"""Observation dtypes (numpy names) an env may declare: the one list the wire (shared/wire/protocol.py) and the replay
(learner/replay/frame_ring.py) build their tables from."""


@dataclass(frozen=True)
class EnvSpec:
    """The observation and action space of an environment."""

    obs_shape: tuple[int, ...]
    """Shape of one observation (one frame when stacked), e.g. (84, 84), (11,), (4, 32, 32)."""
    obs_dtype: str
    """numpy dtype name of an observation; one of OBS_DTYPES."""
    stack: int
    """Observations stacked along a new leading axis into the network's input; 1: no stacking."""
    num_actions: int
    """Size of the discrete action set."""
    masked: bool = False
    """Whether the env provides an action mask at every step."""

    def __post_init__(self) -> None:
        if self.obs_dtype not in OBS_DTYPES:
            raise ValueError(f"obs_dtype {self.obs_dtype!r} is not one of {sorted(OBS_DTYPES)}")
        if not self.obs_shape or any(int(d) < 1 for d in self.obs_shape):
            raise ValueError(f"obs_shape {self.obs_shape!r} must be a non-empty tuple of positive sizes")
        if self.stack < 1:
            raise ValueError(f"stack {self.stack!r} must be >= 1")
        if self.num_actions < 1:
            raise ValueError(f"num_actions {self.num_actions!r} must be >= 1")

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one network input: the stack of observations (the observation itself when stack is 1)."""
        return tuple(self.obs_shape) if self.stack == 1 else (self.stack, *self.obs_shape)


@runtime_checkable
class VectorEnv(Protocol):
    """E envs stepped by one call (see the module docstring for the contract)."""

    num_envs: int
    spec: EnvSpec

    def reset(self, seed: int | None = None) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]: ...

    def action_mask(self) -> np.ndarray: ...

    def close(self) -> None: ...


def checked_action(needs_reset: bool, action: Any, num_actions: int) -> int:
    """A single frame env's checks at the top of ``step``: a reset is not due (RuntimeError: before the first
    reset or after the episode ended) and ``action`` is in [0, num_actions) (ValueError naming it)."""
    if needs_reset:
        raise RuntimeError("step() before reset() or after the episode ended; call reset()")
    a = int(action)
    if not 0 <= a < num_actions:
        raise ValueError(f"action {action!r} out of range [0, {num_actions})")
    return a


def checked_actions(started: bool, actions: Any, num_envs: int) -> np.ndarray:
    """The contract's checks at the top of every ``step``: ``reset()`` came first (RuntimeError) and
    ``actions`` is an integer array of shape ``(num_envs,)`` (ValueError naming what it got)."""
    if not started:
        raise RuntimeError("step() before reset()")
    a = np.asarray(actions)
    if a.shape != (num_envs,) or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"actions must be an integer array of shape ({num_envs},), got {a.dtype} {a.shape}")
    return a
