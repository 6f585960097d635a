"""Film an episode: replay its actions on a fresh emulator and write every frame (mp4) or every 4th (gif).

Mario is deterministic given the actions, so the film is the episode that was scored; a replay that reaches another
score is an error, with the file still written.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.config import EnvConfig
from shared.envs import entry_for, make_env

GIF_EVERY = 4  # a GIF keeps every 4th emulator frame (15 fps at 60): a quarter of the size, same duration
MACRO_BLOCK = 16  # H.264 macro block: frames whose sides are multiples of it are encoded as they are (256x240 is)


@dataclass
class VideoInfo:
    """What :func:`record_video` wrote."""

    path: str
    frames: int  # frames in the file: every emulator frame (mp4), every 4th (gif); the reset screen included
    emulator_frames: int  # emulator frames replayed, plus the reset screen
    seconds: float  # duration of the file (frames / its frame rate)
    score: float  # the score the replay reached (checked against ``expected_score`` when given)
    bytes: int


def _emulator_frames(env_cfg: EnvConfig, actions: np.ndarray, track: dict) -> Generator[np.ndarray, None, None]:
    """Replay ``actions`` (each ``frame_skip`` times) on a fresh Mario env's ``inner``, yielding the reset screen and
    every emulator frame: nes-py's one screen buffer, so use or copy it before the next. ``track`` gets the score and steps."""
    env = make_env(dataclasses.replace(env_cfg, max_episode_steps=0), 0)
    try:
        inner, skip, key = env.inner, env_cfg.frame_skip, env.score_key
        out = inner.reset()
        yield out[0] if isinstance(out, tuple) else out  # Gymnasium: (obs, info)
        best, done = float("-inf"), False
        for a in actions.tolist():
            if done:
                break
            for _ in range(skip):
                out = inner.step(a)
                yield out[0]
                done = bool(out[2] or out[3]) if len(out) == 5 else bool(out[2])
                if done:
                    break
            best = max(best, float(out[-1].get(key, 0)))
            track.update(score=best, steps=track["steps"] + 1)
    finally:
        env.close()


def _padded(frame: np.ndarray, block: int) -> np.ndarray:
    """``frame`` as a contiguous array whose sides are multiples of ``block`` (black bottom/right padding)."""
    h, w = frame.shape[:2]
    ph, pw = -h % block, -w % block
    return np.pad(frame, ((0, ph), (0, pw), (0, 0))) if ph or pw else np.ascontiguousarray(frame)


def _gif_durations_ms(fps: float, every: int) -> Iterator[int]:
    """GIF frame delays in ms (GIF stores centiseconds) whose running sum tracks the true timeline: game speed."""
    return (10 * (round((k + 1) * every * 100 / fps) - round(k * every * 100 / fps)) for k in itertools.count())


def record_video(
    env_cfg: EnvConfig, actions: Iterable[int], path: str, fps: float = 60, expected_score: float | None = None
) -> VideoInfo:
    """Replay ``actions`` on a fresh Mario env and film them to ``path`` (``.mp4`` every frame, ``.gif`` every 4th); raises
    RuntimeError (the file written) when the replay ends early or misses ``expected_score``, ValueError for bad input."""
    if not entry_for(env_cfg).video:
        raise ValueError(f"record_video needs an env that films (Mario), got env.name={env_cfg.name!r}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".mp4", ".gif"):
        raise ValueError(f"video path {path!r} must end in .mp4 or .gif")
    actions = np.asarray(list(actions) if not isinstance(actions, np.ndarray) else actions, dtype=np.int64)
    track: dict = {"score": 0.0, "steps": 0}
    frames = _emulator_frames(env_cfg, actions, track)
    emulated, written, seconds = _write_mp4(frames, path, fps) if ext == ".mp4" else _write_gif(frames, path, fps)
    info = VideoInfo(path, written, emulated, seconds, float(track["score"]), os.path.getsize(path))
    if track["steps"] < len(actions):
        raise RuntimeError(f"replay ended after {track['steps']} of {len(actions)} actions (video {path} written)")
    if expected_score is not None and info.score != float(expected_score):
        raise RuntimeError(
            f"replay reached score {info.score:g}, the episode {float(expected_score):g} "
            f"(the emulator should be deterministic; video {path} written)"
        )
    return info


def _write_mp4(frames: Generator[np.ndarray, None, None], path: str, fps: float) -> tuple[int, int, float]:
    """Every frame to ``path`` through imageio's ffmpeg plugin; (frames emulated, frames written, seconds)."""
    import imageio.v2 as imageio

    h264: dict[str, Any] = dict(
        codec="libx264", pixelformat="yuv420p", macro_block_size=MACRO_BLOCK, quality=None, ffmpeg_log_level="error"
    )
    writer = imageio.get_writer(
        path, format="FFMPEG", mode="I", fps=fps, output_params=["-crf", "18", "-movflags", "+faststart"], **h264
    )
    emulated = 0
    try:
        for frame in frames:
            writer.append_data(_padded(frame, MACRO_BLOCK))  # a contiguous copy of the shared screen
            emulated += 1
    finally:
        frames.close()  # the emulator, when the writer failed part-way
        writer.close()
    return emulated, emulated, emulated / fps


def _write_gif(frames: Generator[np.ndarray, None, None], path: str, fps: float) -> tuple[int, int, float]:
    """Every ``GIF_EVERY``-th frame to ``path`` through Pillow; (frames emulated, frames written, seconds)."""
    from PIL import Image

    durations = _gif_durations_ms(fps, GIF_EVERY)
    emulated = written = total_ms = 0

    def kept() -> Iterator[Image.Image]:
        nonlocal emulated, written, total_ms
        for frame in frames:
            if emulated % GIF_EVERY == 0:
                im = Image.fromarray(np.ascontiguousarray(frame), "RGB")
                im.info["duration"] = d = next(durations)
                total_ms += d
                written += 1
                yield im
            emulated += 1

    it = kept()
    try:
        next(it).save(path, format="GIF", save_all=True, append_images=it, loop=0)
    finally:
        frames.close()
    return emulated, written, total_ms / 1000.0
