"""Frame envs: the single-env interface, its preprocessing, the agent's frame stack, and E of them as one
vector env.

:class:`FrameEnv`: ``reset(seed=None) -> frame`` (a seed replaces the constructor's) and ``step(action) -> (frame,
reward, terminated, truncated, info)``: fresh uint8 frames, ``terminated`` (no bootstrap) and ``truncated`` never both,
``info`` with ``score`` (the episode's so far) and ``success`` (this step); a step after an end without a reset raises
RuntimeError; ``close()`` is idempotent. :class:`FrameVectorEnv` steps E of them under shared/spec.py's contract.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import cv2
import numpy as np

from shared.errors import ConfigError
from shared.spec import EnvSpec, checked_action, checked_actions

SCORE_KINDS = ("furthest", "last")
"""How an env's score adds up over an episode: its furthest value (a distance) or its last (a return)."""


@runtime_checkable
class FrameEnv(Protocol):
    """What actors, the benchmark and the tests step (the module docstring says how)."""

    num_actions: int
    frame_shape: tuple[int, int]

    def reset(self, seed: int | None = None) -> np.ndarray: ...

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FrameState:
    """A :class:`Preprocess` env's saved state: its inner env's own (opaque), the episode's counters and its frame."""

    inner: Any
    t: int
    furthest: float
    stalled: int
    frame: np.ndarray


def _gray_source(frame: np.ndarray) -> tuple[np.ndarray, int] | None:
    """A view of ``frame`` that cv2 reads without copying, and its gray conversion code (None: convert a copy). nes-py's
    screen is a reversed view of a BGRx buffer: converting it makes cv2 copy (~300 us); reading it as BGRA costs ~20 us."""
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"inner env frame must be uint8 [H, W, 3] RGB, got {frame.dtype} {frame.shape}")
    if frame.flags.c_contiguous:
        return frame, cv2.COLOR_RGB2GRAY
    h, w, _ = frame.shape
    s0, s1, s2 = frame.strides
    if s2 == -1 and s1 == 4 and s0 >= 4 * w:
        bgr = frame[:, :, ::-1]  # B at the lowest address of each 4-byte pixel slot
        bgrx = np.lib.stride_tricks.as_strided(bgr, shape=(h, w, 4), strides=(s0, 4, 1), writeable=False)
        root = frame
        while isinstance(root.base, np.ndarray):
            root = root.base
        lo, hi = np.byte_bounds(root)
        vlo, vhi = np.byte_bounds(bgrx)
        if lo <= vlo and vhi <= hi:  # the 4th byte of every slot lies inside the real buffer
            return bgrx, cv2.COLOR_BGRA2GRAY
    return None


class Preprocess:
    """An RGB env (old Gym or Gymnasium API) as a :class:`FrameEnv`: each action repeated ``frame_skip`` frames (rewards
    summed, stopping at an end), the gray max of the last two resized with INTER_AREA; truncated after
    ``max_episode_steps`` or ``no_progress_steps`` without a new furthest score. ``seed_fn`` seeds an ``inner`` whose
    ``reset`` takes no seed; score and success come from its info (``score_key``, ``success_key``)."""

    @property
    def raw(self) -> Any:
        """The emulator under ``inner`` when it names one (Mario: the nes-py env in use), else None."""
        return getattr(self.inner, "raw", None)

    def __init__(
        self,
        inner: Any,
        num_actions: int,
        frame_skip: int,
        frame_size: int,
        max_episode_steps: int,
        *,
        score_key: str,
        success_key: str,
        score_kind: str = "last",
        seed: int | None = None,
        seed_fn: Callable[[int], Any] | None = None,
        no_progress_steps: int = 0,
    ) -> None:
        if frame_skip < 1:
            raise ConfigError(f"env.frame_skip={frame_skip!r} must be >= 1")
        self.inner = inner
        if score_kind not in SCORE_KINDS:
            raise ConfigError(f"score_kind={score_kind!r} must be one of {', '.join(SCORE_KINDS)}")
        self.score_key, self.success_key, self.score_kind = score_key, success_key, score_kind
        self.num_actions = int(num_actions)
        self.frame_shape = (int(frame_size), int(frame_size))
        self._skip = int(frame_skip)
        self._limit = int(max_episode_steps)
        self._stall_limit = int(no_progress_steps)  # steps without a new furthest score that truncate (0: off)
        self._furthest, self._stalled = float("-inf"), 0
        self._seed_fn = seed_fn
        try:
            self._reset_takes_seed = "seed" in inspect.signature(inner.reset).parameters
        except (TypeError, ValueError):
            self._reset_takes_seed = False
        self._pending_seed = seed
        self._gray: list[np.ndarray] | None = None  # two preallocated [H, W] buffers
        self._src_obj: np.ndarray | None = None  # the inner frame object last seen ...
        self._src: tuple[np.ndarray, int] | None = None  # ... and how to read it
        self._t = 0
        self._frame: np.ndarray | None = None  # the observation last returned (save_state keeps a copy)
        self._needs_reset = True
        self._closed = False

    def _to_gray(self, frame: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if frame is not self._src_obj:  # nes-py returns the same object every call: cached
            self._src_obj = frame
            self._src = _gray_source(frame)
        if self._src is None:
            return cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2GRAY, dst=dst)
        src, code = self._src
        return cv2.cvtColor(src, code, dst=dst)

    def _out(self, gray: np.ndarray) -> np.ndarray:
        # a new array every call (the caller may keep it); frame_shape is square, as cv2's (width, height)
        return cv2.resize(gray, self.frame_shape, interpolation=cv2.INTER_AREA)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if self._closed:
            raise RuntimeError("reset() on a closed env")
        seed, self._pending_seed = self._pending_seed if seed is None else seed, None
        if seed is not None and self._reset_takes_seed:
            out = self.inner.reset(seed=seed)
        else:
            if seed is not None and self._seed_fn is not None:
                self._seed_fn(seed)
            out = self.inner.reset()
        if isinstance(out, tuple):  # Gymnasium: (obs, info)
            out = out[0]
        frame = np.asarray(out)
        hw = frame.shape[:2]
        if self._gray is None or self._gray[0].shape != hw:
            self._gray = [np.empty(hw, np.uint8), np.empty(hw, np.uint8)]
        self._t = 0
        self._furthest, self._stalled = float("-inf"), 0
        self._needs_reset = False
        self._frame = self._out(self._to_gray(frame, self._gray[0]))
        return self._frame

    @property
    def has_states(self) -> bool:
        """Whether the inner env saves and restores its state (``save_state``/``restore_state``; Mario's does)."""
        return hasattr(self.inner, "save_state") and hasattr(self.inner, "restore_state")

    def save_state(self) -> FrameState:
        """The episode's state now: a later ``restore_state`` (on this env or one built alike) plays on from here, frame
        for frame and reward for reward as this episode would."""
        if not self.has_states:
            raise TypeError(f"{type(self.inner).__name__} cannot save its state (it has no save_state/restore_state)")
        if self._needs_reset or self._frame is None:
            raise RuntimeError("save_state() outside an episode: reset() or restore_state() first")
        return FrameState(self.inner.save_state(), self._t, self._furthest, self._stalled, self._frame.copy())

    def restore_state(self, state: FrameState) -> np.ndarray:
        """Start an episode at ``state`` (from ``save_state``); returns its frame, as ``reset`` returns the first."""
        if self._closed:
            raise RuntimeError("restore_state() on a closed env")
        if not isinstance(state, FrameState):
            raise TypeError(f"restore_state takes a FrameState from save_state, got {type(state).__name__}")
        if state.frame.shape != self.frame_shape:
            raise ValueError(f"a state of {state.frame.shape} frames restored on an env of {self.frame_shape} frames")
        out = self.inner.restore_state(state.inner)
        frame = np.asarray(out[0] if isinstance(out, tuple) else out)
        if self._gray is None or self._gray[0].shape != frame.shape[:2]:
            self._gray = [np.empty(frame.shape[:2], np.uint8), np.empty(frame.shape[:2], np.uint8)]
        self._t, self._furthest, self._stalled = state.t, state.furthest, state.stalled
        self._needs_reset = False
        self._frame = state.frame.copy()
        return self._frame

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = checked_action(self._needs_reset, action, self.num_actions)
        inner_step = self.inner.step
        gray = cast("list[np.ndarray]", self._gray)  # set by reset(), which checked_action requires first
        total = 0.0
        terminated = truncated = False
        info: dict = {}
        g: np.ndarray | None = None
        last: np.ndarray | None = None
        for i in range(self._skip):
            out = inner_step(a)
            if len(out) == 5:  # Gymnasium
                frame, r, terminated, truncated, info = out
            else:  # old Gym
                frame, r, done, info = out
                terminated = bool(done)
                if terminated and info.get("TimeLimit.truncated", False):
                    terminated, truncated = False, True
            total += r
            last, g = g, self._to_gray(frame, gray[i & 1])
            if terminated or truncated:
                break
        g = cast("np.ndarray", g)  # frame_skip >= 1 (checked in __init__): the loop ran at least once
        if last is not None:
            g = np.maximum(g, last, out=g)
        obs = self._out(g)
        self._t += 1
        terminated = bool(terminated)
        truncated = bool(truncated) and not terminated
        if not terminated and self._limit and self._t >= self._limit:
            truncated = True
        info = dict(info)
        x = float(info.get(self.score_key, 0))
        if x > self._furthest:
            self._furthest, self._stalled = x, 0
        else:
            self._stalled += 1
            if self._stall_limit and self._stalled >= self._stall_limit and not terminated:
                truncated = True  # stuck (at a pipe, against a wall): bootstraps, as any truncation
        self._needs_reset = terminated or truncated
        info["score"] = self._furthest if self.score_kind == "furthest" else x
        info["success"] = bool(info.get(self.success_key, False))
        self._frame = obs
        return obs, float(total), terminated, truncated, info

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._needs_reset = True
            self.inner.close()


class FrameStacker:
    """The agent's stacked observation, uint8 ``[stack, H, W]``, oldest first: ``reset(frame)`` fills every slot, ``push``
    drops the oldest and writes ``frame`` last. ``array`` is the internal array itself: copy it to keep it."""

    def __init__(self, stack: int, frame_shape: tuple[int, int]) -> None:
        if stack < 1:
            raise ValueError(f"stack={stack!r} must be >= 1")
        self._buf = np.zeros((int(stack), *frame_shape), np.uint8)

    @property
    def array(self) -> np.ndarray:
        return self._buf

    def reset(self, frame: np.ndarray) -> np.ndarray:
        self._buf[:] = frame
        return self._buf

    def push(self, frame: np.ndarray) -> np.ndarray:
        buf = self._buf
        buf[:-1] = buf[1:]  # forward overlapping copy: numpy buffers it when needed
        buf[-1] = frame
        return buf


class FrameVectorEnv:
    """Single frame envs (:class:`FrameEnv`) stepped side by side as a shared/spec.py vector env; ``success``: any step's.
    ``starts(e)``, when set, gives the state env ``e``'s next episode starts at (None: the true start)."""

    def __init__(self, envs: list, spec: EnvSpec):
        if not envs:
            raise ConfigError("FrameVectorEnv needs at least one env")
        self.envs, self.spec, self.num_envs = list(envs), spec, len(envs)
        self.starts: Callable[[int], Any] | None = None
        self._shape = tuple(spec.obs_shape)
        self._success = np.zeros(self.num_envs, bool)  # any step of each env's episode so far succeeded
        self._mask = np.ones((self.num_envs, spec.num_actions), bool)
        self._started = False

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs = np.empty((self.num_envs, *self._shape), np.uint8)
        for e, env in enumerate(self.envs):
            obs[e] = env.reset(None if seed is None else seed + e)
        self._success[:] = False
        self._started = True
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = checked_actions(self._started, actions, self.num_envs)
        n = self.num_envs
        obs = np.empty((n, *self._shape), np.uint8)
        reward = np.empty(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        score = np.empty(n, np.float64)
        success = np.empty(n, bool)
        for e, (env, action) in enumerate(zip(self.envs, a.tolist())):
            frame, r, term, trunc, info = env.step(action)
            reward[e] = r
            self._success[e] |= bool(info["success"])
            score[e], success[e] = info["score"], self._success[e]
            if term or trunc:
                terminated[e], truncated[e] = term, trunc
                state = self.starts(e) if self.starts is not None else None
                obs[e] = env.reset() if state is None else env.restore_state(state)
                self._success[e] = False
            else:
                obs[e] = frame  # a copy: nes-py reuses its screen buffer
        return obs, reward, terminated, truncated, {"score": score, "success": success}

    def action_mask(self) -> np.ndarray:
        return self._mask.copy()

    def save_state(self, e: int) -> Any:
        """Env ``e``'s episode state now (its ``save_state``)."""
        return self.envs[e].save_state()

    def close(self) -> None:
        for env in self.envs:
            env.close()
