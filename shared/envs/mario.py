"""Super Mario Bros (nes-py) as a warppipe env: its options, button sets, stages and the env itself.

Score: the episode's furthest ``x_pos``; success: the flag. Frames go through shared/envs/frames.py ``Preprocess``.
The emulator packages are imported only when an env is built, so the learner never loads them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shared.envs import check_env, frame_entry, options, register
from shared.errors import ConfigError, check, check_range

if TYPE_CHECKING:
    from shared.config import EnvConfig

# gym_super_mario_bros.actions' button lists (a test checks), copied so that importing this module does not import gym
_RIGHT_ONLY = [["NOOP"], ["right"], ["right", "A"], ["right", "B"], ["right", "A", "B"]]
_SIMPLE = _RIGHT_ONLY + [["A"], ["left"]]
ACTION_SETS: dict[str, list[list[str]]] = {
    "right_only": _RIGHT_ONLY,
    "simple": _SIMPLE,
    "complex": _SIMPLE + [["left", "A"], ["left", "B"], ["left", "A", "B"], ["down"], ["up"]],
}


@dataclass
class MarioOptions:
    """Super Mario Bros (``--env.mario.*``)."""

    stage: str = "1-1"
    """World-stage 'W-S' (e.g. 1-1, 4-2); 'all' plays the whole game, ending at game over."""
    actions: Literal["right_only", "simple", "complex"] = "simple"
    """Button set: right_only (5 actions), simple (7, SIMPLE_MOVEMENT) or complex (12)."""
    jump_release: bool = True
    """Release A for one frame when it was held on the ground, so a policy holding right+A jumps again (SMB jumps only
    when A goes down); False: the raw buttons."""
    no_progress_steps: int = 250
    """Agent steps without a new furthest x_pos after which an episode is truncated (0: never), about 17 s of game
    time, so a policy stuck at a pipe does not play out the game clock."""

    def describe(self) -> str:
        """The button set and jump release in a few words (the run header)."""
        return f"{self.actions} buttons, " + ("jump release" if self.jump_release else "raw buttons (no jump release)")

    def validate(self) -> None:
        parse_stage(self.stage)
        check(
            self.actions in ACTION_SETS, "env.mario.actions", self.actions, f"must be one of {', '.join(map(repr, ACTION_SETS))}"
        )
        check_range(self, "env.mario.no_progress_steps", 0, math.inf, "must be an integer >= 0 (0: never)")


def parse_stage(stage: str) -> tuple[int, int] | None:
    """'W-S' -> (W, S); 'all' -> None (the whole game). Raises ConfigError naming a bad value."""
    if stage == "all":
        return None
    parts = stage.split("-") if isinstance(stage, str) else []
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        world, sub = int(parts[0]), int(parts[1])
        if 1 <= world <= 8 and 1 <= sub <= 4:
            return world, sub
    raise ConfigError(f"env.mario.stage={stage!r} must be 'W-S' with W in 1..8 and S in 1..4, or 'all'")


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


class _Pad:
    """Action index -> NES button byte on the emulator, with the jump release: A released for a frame when it would be
    held on the ground (SMB jumps only when A goes down, which a frame stack cannot show; held in the air it still gives
    the full-height jump). It also gives the env states: a state is the bytes sent since the true start, and restoring
    one resets an emulator parked at it. nes-py 8 keeps one backup per emulator, so up to ``parked`` extra emulators
    each hold one state (least recently used replaced); parking one replays its bytes from a fresh emulator's start."""

    A = 0b00000001  # nes-py's JoypadSpace bit for the A button
    ON_GROUND_ADDR = 0x1D  # Player_FloatState: 0 on the ground

    def __init__(self, make_raw: Callable[[], Any], action_bytes: list[int], jump_release: bool, parked: int) -> None:
        self._make_raw, self._bytes, self._release, self._max_parked = make_raw, action_bytes, jump_release, parked
        self._origin = self.raw = make_raw()  # its backup is the true start
        self._ram = self.raw.ram
        self._log = bytearray()  # bytes sent since the true start: the state
        self._held = self._held_before = 0  # bytes sent on the last frame and the one before
        self._parked: collections.OrderedDict[bytes, Any] = collections.OrderedDict()  # state -> emulator, oldest use first
        self.parks, self.park_seconds, self.park_frames = 0, 0.0, 0  # what parking cost (the benchmark reads them)

    def reset(self) -> Any:
        self._use(self._origin)
        self._log.clear()
        self._held = self._held_before = 0
        return self._origin.reset()

    def step(self, action: int) -> Any:
        byte = self._bytes[action]
        # the game acts on a press one frame late, so A must have been sent on both of the last two frames
        if self._release and byte & self._held & self._held_before & self.A and self._ram[self.ON_GROUND_ADDR] == 0:
            byte &= ~self.A
        self._held_before, self._held = self._held, byte
        self._log.append(byte)
        return self.raw.step(byte)

    def save_state(self) -> bytes:
        """This episode's state: the bytes sent since the true start (about 4 per agent step at frame skip 4)."""
        return bytes(self._log)

    def restore_state(self, state: bytes) -> Any:
        """Reset to ``state`` (from ``save_state`` of a pad on the same stage and buttons); returns the screen."""
        if not isinstance(state, bytes):
            raise TypeError(f"a Mario state is the bytes save_state returned, got {type(state).__name__}")
        raw = self._parked.pop(state, None) or self._park(state)
        self._parked[state] = raw
        while len(self._parked) > self._max_parked:
            self._parked.popitem(last=False)[1].close()
        self._use(raw)
        self._log[:] = state
        self._held = state[-1] if state else 0
        self._held_before = state[-2] if len(state) > 1 else 0
        return raw.reset()  # back to its backup: the state

    def _park(self, state: bytes) -> Any:
        start = time.perf_counter()
        raw = self._make_raw()
        step = raw.step
        for byte in state:  # the emulator's frames, one call each: nes-py 8 has no other way to a state
            if step(byte)[2]:
                raw.close()
                raise ValueError(f"this state's {len(state):,} frames end their episode: not a state of a live episode")
        raw._backup()
        self.parks += 1
        self.park_seconds += time.perf_counter() - start
        self.park_frames += len(state)
        return raw

    def _use(self, raw: Any) -> None:
        self.raw, self._ram = raw, raw.ram

    def close(self) -> None:
        for raw in [self._origin, *self._parked.values()]:
            if raw._env is not None:
                raw.close()
        self._parked.clear()


PARKED_EMULATORS = 16
"""Emulators each Mario env keeps parked at saved states (one nes-py 8.2 emulator, about 1 MB, holds one state)."""


def make_mario_env(cfg: EnvConfig, seed: int) -> Any:
    """Super Mario Bros built in this process: a frames.py ``Preprocess`` whose ``raw`` is the nes-py env in use. The game
    is deterministic; ``seed`` seeds the raw env's unused ``np_random``, as every env takes one."""
    from shared.envs.frames import Preprocess

    _, cfg = check_env(cfg)  # the episode cap at Mario's when auto, the options checked
    opts = mario_options(cfg)
    buttons = ACTION_SETS[opts.actions]
    SuperMarioBrosEnv, JoypadSpace = _import_mario()
    target = parse_stage(opts.stage)

    def make_raw() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return SuperMarioBrosEnv(rom_mode="vanilla", lost_levels=False, target=target)

    pad = _Pad(make_raw, [], opts.jump_release, PARKED_EMULATORS)
    joypad = JoypadSpace(pad.raw, buttons)  # nes-py's own button bytes
    pad._bytes = [int(joypad._action_map[i]) for i in range(len(buttons))]
    env = Preprocess(
        pad,
        len(buttons),
        cfg.frame_skip,
        cfg.frame_size,
        cfg.max_episode_steps,
        score_key="x_pos",
        success_key="flag_get",
        score_kind="furthest",
        seed=seed,
        seed_fn=lambda s: pad.raw.seed(s),
        no_progress_steps=opts.no_progress_steps,
    )
    return env


def mario_options(cfg: EnvConfig) -> MarioOptions:
    """``cfg``'s Mario options (``--env.mario.*``)."""
    return options(cfg, "mario", MarioOptions)


def _with_stage(cfg: EnvConfig, stage: str) -> EnvConfig:
    parse_stage(stage)
    return dataclasses.replace(cfg, options={**cfg.options, "mario": dataclasses.replace(mario_options(cfg), stage=stage)})


def _buttons(cfg: EnvConfig) -> list[list[str]]:
    """``cfg``'s button set: the buttons of each action, in action order."""
    return ACTION_SETS[mario_options(cfg).actions]


HAZARDS: dict[str, list[tuple[str, float, float]]] = {
    "1-1": [
        ("goomba", 250, 400),  # the first goomba
        ("pipes", 400, 900),  # the pipes and the goombas between them (most end at 650-749)
        ("pit1", 1050, 1250),  # the first pit (most end at 1,100-1,199)
        ("pit2", 1350, 1600),  # the second pit (most end at 1,400-1,549)
        ("goombas", 1700, 2100),  # the goombas before the stairs (most end at 1,783-2,029)
        ("stairs", 2100, 3200),  # the stairs and the last pit; the flag is at about 3,161 (a success, not an end)
    ],
}
"""Per stage, the x_pos ranges where episodes that miss the flag end (clustered in docs/lab/experiments/mario.md)."""


ENTRY = register(
    frame_entry(
        "mario",
        make_mario_env,
        lambda cfg: ["+".join(buttons) for buttons in _buttons(cfg)],
        options_type=MarioOptions,
        stage=_with_stage,
        label=lambda cfg: mario_options(cfg).stage,
        options=lambda cfg: mario_options(cfg).describe(),
        score="Distance",
        success="Flags",
        video=True,
        states=True,
        hazards=lambda cfg: HAZARDS.get(mario_options(cfg).stage, []),
        noop_action=lambda cfg: _buttons(cfg).index(["NOOP"]),
        # right+A, with the jump release, reaches 1-1's flag: the probe set (shared/probe_set.py) spans the stage
        probe_action=lambda cfg: _buttons(cfg).index(["right", "A"]),
        reward_scale=1 / 15,
        target_sync_env_steps=16_000,
        rule="munchausen",
        total_env_steps=300_000,
    )
)
"""Rewards (clipped to +-15 a frame) scaled by 1/15; target sync, rule and budget as chosen in docs/lab/experiments/mario.md."""
