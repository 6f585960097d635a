"""Frame environments: the one interface actors, the benchmark and the tests step.

Contract (:class:`FrameEnv`)
----------------------------
``num_actions``   int, size of the discrete action set (5 / 7 / 12 for right_only / simple / complex).
``frame_shape``   ``(size, size)`` of one observation frame.
``reset(seed=None) -> frame``
    Starts an episode. ``frame`` is uint8 ``[size, size]`` and a *fresh* array: the caller may
    keep it; the env never writes to it again. A seed given here replaces the constructor's
    seed (which applies to the first reset).
``step(action) -> (frame, reward, terminated, truncated, info)``
    ``frame`` is fresh as above; ``reward`` a Python float; ``terminated`` means the episode
    really ended (do not bootstrap); ``truncated`` means it was cut by the time limit
    (``max_episode_steps`` agent steps; bootstrap). The two are never both True. ``info``
    holds at least ``x_pos`` (int) and ``flag_get`` (bool). Stepping after either flag
    without a reset raises ``RuntimeError``.
``close()``       releases the emulator; idempotent.

:func:`make_env` builds one from an :class:`~shared.config.EnvConfig` (``name`` 'mario' or
'fake'); a bad configuration raises :class:`~shared.config.ConfigError` naming the value.

Preprocessing (:class:`MarioEnv`, via :class:`_Preprocess`)
-----------------------------------------------------------
One agent step repeats the action for ``frame_skip`` emulator frames, summing the rewards and
stopping early when the episode ends. Each emulator frame is converted to grayscale
(OpenCV's RGB->GRAY weights) into one of two preallocated buffers; the observation is the
elementwise max of the last two frames emulated in this step (a single frame when only one
was), resized to ``frame_size`` x ``frame_size`` with ``INTER_AREA``, uint8. The reset frame is
the gray, resized reset screen. The emulator is built inside the calling process, never pickled.

Jump release (``env.jump_release``, on by default): SMB starts a jump only on the frame A goes
down, so an agent that keeps choosing a jump action while standing (against a pipe, after
landing) would hold A and never jump again; the 84x84 frame stack cannot show that A is held.
With jump release, a frame that asks for A while A was sent on each of the two frames before and
Mario is on the ground (RAM 0x1D == 0) sends the same buttons without A: the next frame presses A
again and jumps (two frames, not one: the game acts on a press one frame late, so Mario still reads
as on the ground on the frame after A went down, and releasing then would cut the jump short).
Holding A in the air still gives the full-height jump.

The inner env may speak the old Gym API (``reset() -> obs``; ``step -> (obs, r, done, info)``,
nes-py 8 / gym-super-mario-bros 7) or the Gymnasium API (``reset() -> (obs, info)``;
``step -> (obs, r, terminated, truncated, info)``, gym-super-mario-bros 9); the shape of
what it returns decides, call by call.

:class:`FakeEnv` is a fast synthetic stand-in with the same shapes (no emulator), and
:class:`FrameStacker` keeps the agent's ``[stack, H, W]`` observation, the reference the
replay rebuilds from single frames.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import sys
import warnings
from typing import Any, Callable, Protocol, runtime_checkable

import cv2
import numpy as np

from shared.catch import NUM_ACTIONS as CATCH_ACTIONS, CatchEnv
from shared.config import ConfigError, EnvConfig

__all__ = [
    "ACTION_SETS",
    "FAKE_EPISODE_RANGE",
    "FakeEnv",
    "FrameEnv",
    "FrameStacker",
    "MarioEnv",
    "make_env",
    "num_actions_for",
    "parse_stage",
]

# Button lists, identical to gym_super_mario_bros.actions (a test checks it). Copied here so
# importing this module (learner, fake env) does not import gym.
ACTION_SETS: dict[str, list[list[str]]] = {
    "right_only": [
        ["NOOP"], ["right"], ["right", "A"], ["right", "B"], ["right", "A", "B"],
    ],
    "simple": [
        ["NOOP"], ["right"], ["right", "A"], ["right", "B"], ["right", "A", "B"], ["A"], ["left"],
    ],
    "complex": [
        ["NOOP"], ["right"], ["right", "A"], ["right", "B"], ["right", "A", "B"], ["A"], ["left"],
        ["left", "A"], ["left", "B"], ["left", "A", "B"], ["down"], ["up"],
    ],
}

FAKE_EPISODE_RANGE = (8, 256)
"""FakeEnv episode lengths (agent steps until termination) are drawn uniformly from [lo, hi]."""


@runtime_checkable
class FrameEnv(Protocol):
    """What actors, the benchmark and the tests step (see the module docstring)."""

    num_actions: int
    frame_shape: tuple[int, int]

    def reset(self, seed: int | None = None) -> np.ndarray: ...

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- config helpers


def num_actions_for(cfg: EnvConfig) -> int:
    """Number of discrete actions: Catch has 3; otherwise the size of ``cfg.actions`` (5, 7 or 12)."""
    if cfg.name == "catch":
        return CATCH_ACTIONS
    return len(_action_set(cfg.actions))


def _action_set(name: str) -> list[list[str]]:
    try:
        return ACTION_SETS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"env.actions={name!r} must be one of {sorted(ACTION_SETS)}") from None


def parse_stage(stage: str) -> tuple[int, int] | None:
    """'W-S' -> (W, S); 'all' -> None (the whole game). Raises ConfigError naming a bad value."""
    if stage == "all":
        return None
    parts = stage.split("-") if isinstance(stage, str) else []
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        world, sub = int(parts[0]), int(parts[1])
        if 1 <= world <= 8 and 1 <= sub <= 4:
            return world, sub
    raise ConfigError(f"env.stage={stage!r} must be 'W-S' with W in 1..8 and S in 1..4, or 'all'")


def _check_cfg(cfg: EnvConfig, mario: bool) -> None:
    """cfg.validate() plus what it leaves out (the action set; the stage when name is not 'mario')."""
    cfg.validate()
    _action_set(cfg.actions)
    if mario:
        parse_stage(cfg.stage)


def make_env(cfg: EnvConfig, seed: int) -> FrameEnv:
    """Build the env ``cfg.name`` names ('mario' or 'fake') in this process."""
    if cfg.name == "mario":
        return MarioEnv(cfg, seed)
    if cfg.name == "fake":
        return FakeEnv(cfg, seed)
    if cfg.name == "catch":
        return CatchEnv(cfg.frame_size, seed, cfg.max_episode_steps)
    raise ConfigError(f"env.name={cfg.name!r} must be 'mario', 'catch' or 'fake'")


# --------------------------------------------------------------------------- preprocessing


def _gray_source(frame: np.ndarray) -> tuple[np.ndarray, int] | None:
    """A view of ``frame`` that cv2 reads without copying, and its gray conversion code.

    None when there is none (then each call converts a contiguous copy). nes-py's screen is a
    reversed view ``[:, :, ::-1][:, :, 1:]`` of a little-endian BGRx buffer: converting that view
    makes cv2 copy it (~300 us); reading the same bytes as BGRA costs ~20 us.
    """
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


class _Preprocess:
    """Frame skip, gray, max of the last two frames, resize and time limit around an inner env.

    ``inner`` has ``reset()`` and ``step(action)`` in the old Gym or the Gymnasium shape (see the
    module docstring) returning uint8 RGB ``[H, W, 3]`` frames, which may be one buffer reused on
    every call. ``seed_fn(seed)`` seeds it when its ``reset`` takes no ``seed`` keyword.
    """

    def __init__(self, inner: Any, num_actions: int, frame_skip: int, frame_size: int,
                 max_episode_steps: int, seed: int | None = None,
                 seed_fn: Callable[[int], Any] | None = None, no_progress_steps: int = 0) -> None:
        if frame_skip < 1:
            raise ConfigError(f"env.frame_skip={frame_skip!r} must be >= 1")
        self.inner = inner
        self.num_actions = int(num_actions)
        self.frame_shape = (int(frame_size), int(frame_size))
        self._skip = int(frame_skip)
        self._size = (int(frame_size), int(frame_size))  # cv2 wants (width, height); square anyway
        self._limit = int(max_episode_steps)
        self._stall_limit = int(no_progress_steps)  # steps without a new furthest x_pos that truncate (0: off)
        self._furthest, self._stalled = -1, 0
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
        self._needs_reset = True
        self._closed = False

    # -- helpers
    def _to_gray(self, frame: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if frame is not self._src_obj:  # nes-py returns the same object every call: cached
            self._src_obj = frame
            self._src = _gray_source(frame)
        if self._src is None:
            return cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2GRAY, dst=dst)
        src, code = self._src
        return cv2.cvtColor(src, code, dst=dst)

    def _out(self, gray: np.ndarray) -> np.ndarray:
        # a new [size, size] array every call: the caller may keep it
        return cv2.resize(gray, self._size, interpolation=cv2.INTER_AREA)

    # -- FrameEnv
    def reset(self, seed: int | None = None) -> np.ndarray:
        if self._closed:
            raise RuntimeError("reset() on a closed env")
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
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
        self._furthest, self._stalled = -1, 0
        self._needs_reset = False
        return self._out(self._to_gray(frame, self._gray[0]))

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._needs_reset:
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        a = int(action)
        if not 0 <= a < self.num_actions:
            raise ValueError(f"action {action!r} out of range [0, {self.num_actions})")
        inner_step = self.inner.step
        gray = self._gray
        total = 0.0
        terminated = truncated = False
        info: dict = {}
        g = last = None
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
        if last is not None:
            g = np.maximum(g, last, out=g)
        obs = self._out(g)
        self._t += 1
        terminated = bool(terminated)
        truncated = bool(truncated) and not terminated
        if not terminated and self._limit and self._t >= self._limit:
            truncated = True
        info = dict(info)
        info["x_pos"] = x = int(info.get("x_pos", 0))
        if x > self._furthest:
            self._furthest, self._stalled = x, 0
        else:
            self._stalled += 1
            if self._stall_limit and self._stalled >= self._stall_limit and not terminated:
                truncated = True  # stuck (at a pipe, against a wall): bootstraps, as any truncation
        self._needs_reset = terminated or truncated
        info["flag_get"] = bool(info.get("flag_get", False))
        return obs, float(total), terminated, truncated, info

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._needs_reset = True
            self.inner.close()


# --------------------------------------------------------------------------- Mario


def _import_mario() -> tuple[Any, Any]:
    """Import the emulator packages, hiding gym's import-time notice (a print to stderr)."""
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stderr(buf):
        warnings.simplefilter("ignore", DeprecationWarning)
        from gym_super_mario_bros.smb_env import SuperMarioBrosEnv
        from nes_py.wrappers import JoypadSpace
    text = buf.getvalue()
    if text and "Gymnasium" not in text:  # not the known notice: let it through
        sys.stderr.write(text)
    return SuperMarioBrosEnv, JoypadSpace


class _JumpReleasePad:
    """Action index -> NES button byte, releasing A for one frame when it would be held on the ground.

    Wraps a nes-py ``JoypadSpace`` and steps the raw emulator with the byte itself (module
    docstring, "Jump release").
    """

    A = 0b00000001  # nes-py's JoypadSpace bit for the A button
    ON_GROUND_ADDR = 0x1D  # Player_FloatState: 0 on the ground

    def __init__(self, joypad: Any, raw: Any) -> None:
        self._joypad = joypad
        self._raw_step = joypad.env.step
        self._ram = raw.ram
        self._bytes = [int(joypad._action_map[i]) for i in range(len(joypad._action_map))]
        self._held = self._held_before = 0  # bytes sent on the last frame and the one before

    def reset(self) -> Any:
        self._held = self._held_before = 0
        return self._joypad.reset()

    def step(self, action: int) -> Any:
        byte = self._bytes[action]
        # The game acts on a press one frame late (Mario still reads as on the ground on the frame
        # after A went down), so A must have been sent on both of the last two frames.
        if byte & self._held & self._held_before & self.A and self._ram[self.ON_GROUND_ADDR] == 0:
            byte &= ~self.A
        self._held_before, self._held = self._held, byte
        return self._raw_step(byte)

    def close(self) -> None:
        self._joypad.close()


class MarioEnv(_Preprocess):
    """Super Mario Bros (nes-py), built in this process, with the standard preprocessing.

    nes-py has no randomness of its own for SMB (the game is deterministic given the actions);
    ``seed`` seeds the raw env's ``np_random`` (unused by the game) for interface uniformity.
    """

    def __init__(self, cfg: EnvConfig, seed: int) -> None:
        _check_cfg(cfg, mario=True)
        buttons = _action_set(cfg.actions)
        target = parse_stage(cfg.stage)
        SuperMarioBrosEnv, JoypadSpace = _import_mario()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            raw = SuperMarioBrosEnv(rom_mode="vanilla", lost_levels=False, target=target)
            inner = JoypadSpace(raw, buttons)
        if cfg.jump_release:
            inner = _JumpReleasePad(inner, raw)
        self.raw = raw
        super().__init__(inner, len(buttons), cfg.frame_skip, cfg.frame_size, cfg.max_episode_steps,
                         seed=seed, seed_fn=getattr(raw, "seed", None), no_progress_steps=cfg.no_progress_steps)


# --------------------------------------------------------------------------- fake


class FakeEnv:
    """Fast synthetic env for plumbing tests: no emulator, deterministic given the seed.

    Every frame (reset or step) carries, little-endian in its first 16 bytes, a uint64 counter of
    frames this env produced since its last seeding and the seed (mod 2**64); the rest is a slice
    of a seed-derived noise pattern shifted by the counter. So frames are unique per
    (seed, episode, step). Episode lengths are drawn from :data:`FAKE_EPISODE_RANGE` and end in
    termination, or in truncation when ``max_episode_steps`` comes first. Reward: 1.0 when the
    action equals ``counter % num_actions`` of the frame the agent saw, else -0.1; ``info``
    ``x_pos`` = 3 * step in the episode, ``flag_get`` True on ~1 in 4 terminations.
    """

    def __init__(self, cfg: EnvConfig, seed: int) -> None:
        _check_cfg(cfg, mario=False)
        self.num_actions = num_actions_for(cfg)
        self.frame_shape = (cfg.frame_size, cfg.frame_size)
        self._n = cfg.frame_size * cfg.frame_size
        self._limit = cfg.max_episode_steps
        self._seed_all(seed)
        self._pending_seed: int | None = None  # constructor seed already applied
        self._needs_reset = True

    def _seed_all(self, seed: int) -> None:
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed & 0xFFFF_FFFF_FFFF_FFFF)
        self._pattern = self._rng.integers(0, 256, self._n + 256, dtype=np.uint8)
        self._count = 0

    def _frame(self) -> np.ndarray:
        frame = np.empty(self.frame_shape, np.uint8)
        flat = frame.reshape(-1)
        off = self._count % 256
        flat[16:] = self._pattern[off: off + self._n - 16]
        flat[:16].view("<u8")[:] = (self._count, self._seed & 0xFFFF_FFFF_FFFF_FFFF)
        self._good = self._count % self.num_actions
        self._count += 1
        return frame

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._seed_all(seed)
        lo, hi = FAKE_EPISODE_RANGE
        self._length = int(self._rng.integers(lo, hi + 1))
        self._flag = bool(self._rng.random() < 0.25)
        self._t = 0
        self._needs_reset = False
        return self._frame()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._needs_reset:
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        a = int(action)
        if not 0 <= a < self.num_actions:
            raise ValueError(f"action {action!r} out of range [0, {self.num_actions})")
        reward = 1.0 if a == self._good else -0.1
        self._t += 1
        terminated = self._t >= self._length
        truncated = not terminated and self._limit > 0 and self._t >= self._limit
        self._needs_reset = terminated or truncated
        info = {"x_pos": 3 * self._t, "flag_get": terminated and self._flag}
        return self._frame(), reward, terminated, truncated, info

    def close(self) -> None:
        self._needs_reset = True


# --------------------------------------------------------------------------- stacking


class FrameStacker:
    """The agent's stacked observation, uint8 ``[stack, H, W]``, oldest first, in one array.

    ``reset(frame)`` fills every slot with ``frame``; ``push(frame)`` shifts the stack one slot
    towards the front (dropping the oldest) and writes ``frame`` last. ``array`` is the internal
    array itself (not a copy): it changes on the next push, so copy it to keep it.
    """

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
