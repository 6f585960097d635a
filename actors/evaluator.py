"""The evaluation role: play whole episodes with a fixed policy, summarise them, film one.

Used by ``python -m launch.evaluate``, launch/final_eval.py and actors/eval_actor.py; no data plane. All randomness
comes from the ``seed`` and Mario is deterministic given the actions, so a pure-greedy Mario episode always repeats.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from shared.config import EnvConfig, NetConfig
from shared.envs import action_names, entry_for, env_spec, make_env, make_vector_env
from shared.envs.frames import FrameStacker
from shared.network import build_q_network
from shared.wire.protocol import action_dtype

POLICIES = ("greedy", "random", "constant")
GIF_EVERY = 4  # a GIF keeps every 4th emulator frame (15 fps at 60): a quarter of the size, same duration
MACRO_BLOCK = 16  # H.264 macro block: frames whose sides are multiples of it are encoded as they are (256x240 is)
NOOP_STREAM = 0x6E6F6F70  # "noop": the key that separates the no-op counts' stream from the policy's


@dataclass
class Episode:
    """One evaluation episode, scored as its env scores it (Mario: the furthest x_pos and the flag)."""

    score: float
    success: bool
    ret: float  # the sum of rewards in game units (no clipping, no discount)
    length: int  # agent steps (each ``frame_skip`` emulator frames, fewer on the last one)
    actions: np.ndarray  # uint8 [length] (uint16 past 256 actions): the action of each step (replay: record_video)
    noops: int | None = None  # no-op steps drawn for its start (fewer played when it ended first); None: no no-op start


@dataclass
class VideoInfo:
    """What :func:`record_video` wrote."""

    path: str
    frames: int  # frames in the file: every emulator frame (mp4), every 4th (gif); the reset screen included
    emulator_frames: int  # emulator frames replayed, plus the reset screen
    seconds: float  # duration of the file (frames / its frame rate)
    score: float  # the score the replay reached (checked against ``expected_score`` when given)
    bytes: int


def build_network(env_cfg: EnvConfig, state_dict: dict | None = None, net_cfg: NetConfig | None = None) -> torch.nn.Module:
    """A CPU Q-network for ``env_cfg`` shaped by ``net_cfg`` (None: the defaults) in eval mode, loaded with ``state_dict``
    if given (``_orig_mod.`` prefixes accepted)."""
    shape = net_cfg or NetConfig()
    net = build_q_network(env_spec(env_cfg), dueling=shape.dueling)
    if state_dict is not None:
        net.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in state_dict.items()})
    return net.eval()


def action_names_for(env_cfg: EnvConfig) -> list[str]:
    """Readable action names (the env's registry entry): Mario button lists joined with '+' (``"right+A+B"``)."""
    return action_names(env_cfg)


def noop_counts(seed: int, episodes: int, noop_max: int) -> list[int]:
    """Each episode's no-op start, uniform in [0, noop_max] from a stream of its own: the same for every policy on ``seed``."""
    if noop_max <= 0:
        return [0] * episodes
    rng = np.random.default_rng([int(seed) & 0xFFFF_FFFF_FFFF_FFFF, NOOP_STREAM])
    return [int(n) for n in rng.integers(0, noop_max + 1, size=episodes)]


def play_episodes(
    net: torch.nn.Module | None,
    env_cfg: EnvConfig,
    episodes: int,
    epsilon: float,
    seed: int,
    policy: str = "greedy",
    action: int | None = None,
    noop_max: int = 0,
) -> list[Episode]:
    """Play ``episodes`` whole episodes on one env built with ``seed`` (vector envs: one per env) with ``policy`` "greedy"
    (epsilon-greedy on ``net``), "random" or "constant" (``action``); ``noop_max`` > 0: DQN Zoo's no-op starts."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} must be one of {POLICIES}")
    if episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be >= 1")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon={epsilon!r} must be in [0, 1]")
    if not (isinstance(noop_max, int) and noop_max >= 0):
        raise ValueError(f"noop_max={noop_max!r} must be an integer >= 0")
    greedy, constant = policy == "greedy", policy == "constant"
    if greedy and net is None:
        raise ValueError("policy='greedy' needs a network")
    num_actions = env_spec(env_cfg).num_actions
    entry = entry_for(env_cfg)
    single = entry.make_single is not None
    noops = noop_counts(seed, episodes, noop_max) if noop_max else None
    noop = entry.noop_of(env_cfg)
    if constant and (not single or not (isinstance(action, int) and 0 <= action < num_actions)):
        raise ValueError(
            f"policy='constant' needs action in [0, {num_actions}) on a single env, got action={action!r} "
            f"on env.name={env_cfg.name!r}"
        )
    if greedy:  # net is not None (checked above), here and in the loop below
        cast("torch.nn.Module", net).eval()
    if not single:
        return _play_vector(net if greedy else None, env_cfg, episodes, float(epsilon) if greedy else 1.0, seed, noops, noop)
    rng = np.random.default_rng(seed)
    eps = float(epsilon) if greedy or constant else 1.0
    env = make_env(env_cfg, seed)
    stacker = FrameStacker(env_cfg.stack, env.frame_shape)
    obs_t = torch.from_numpy(stacker.array).unsqueeze(0)  # shares memory: follows every push
    out: list[Episode] = []
    try:
        with torch.inference_mode():
            for i in range(episodes):
                stacker.reset(env.reset())
                step, push, draw, pick = env.step, stacker.push, rng.random, rng.integers
                actions = bytearray()  # np.frombuffer below: no copy, a new bytearray per episode
                ret, score, success, done = 0.0, 0.0, False, False
                drawn = None if noops is None else noops[i]
                still = drawn or 0  # no-op steps left at the start
                while not done:
                    if still:
                        a, still = noop, still - 1
                    elif eps >= 1.0 or (eps > 0.0 and draw() < eps):
                        a = int(pick(num_actions))
                    elif constant:  # action is an int (checked above)
                        a = cast(int, action)
                    else:
                        a = int(cast("torch.nn.Module", net)(obs_t).argmax(dim=1))
                    frame, reward, terminated, truncated, info = step(a)
                    push(frame)
                    actions.append(a)
                    ret += reward
                    score, success = info["score"], success or info["success"]
                    done = terminated or truncated
                out.append(
                    Episode(float(score), bool(success), float(ret), len(actions), np.frombuffer(actions, np.uint8), drawn)
                )
    finally:
        env.close()
    return out


def _play_vector(
    net: torch.nn.Module | None, env_cfg: EnvConfig, episodes: int, eps: float, seed: int, noops: list[int] | None, noop: int
) -> list[Episode]:
    """One episode (its first) in each of ``episodes`` envs of one vector env, stepped together."""
    spec = env_spec(env_cfg)
    env = make_vector_env(env_cfg, [seed] * episodes)
    rng = np.random.default_rng(seed)
    n = episodes
    ret, length = np.zeros(n), np.zeros(n, np.int64)
    score, success = np.zeros(n), np.zeros(n, bool)
    active = np.ones(n, bool)
    taken: list[np.ndarray] = []
    mask = np.ones((n, spec.num_actions), bool)
    starts = None if noops is None else np.asarray(noops, np.int64)
    try:
        obs = env.reset()
        with torch.inference_mode():
            while active.any():
                if spec.masked:
                    mask = env.action_mask()
                randoms = np.where(mask, rng.random(mask.shape), -1.0).argmax(axis=1)
                explore = rng.random(n) < eps
                actions = randoms
                if net is not None and not explore.all():
                    q = net(torch.from_numpy(obs)).numpy()
                    actions = np.where(explore, randoms, np.where(mask, q, -np.inf).argmax(axis=1))
                if starts is not None:
                    actions = np.where(length < starts, np.where(mask[:, noop], noop, randoms), actions)
                obs, reward, terminated, truncated, info = env.step(actions)
                taken.append(actions)
                ret[active] += reward[active]
                length[active] += 1
                done = (terminated | truncated) & active
                score[done], success[done] = info["score"][done], info["success"][done]
                active &= ~done
    finally:
        env.close()
    played = np.stack(taken).astype(action_dtype(spec.num_actions))  # [steps, n]
    drawn: list[int | None] = [None] * n if noops is None else list(noops)
    return [
        Episode(float(score[i]), bool(success[i]), float(ret[i]), int(k), np.ascontiguousarray(played[:k, i]), drawn[i])
        for i, k in enumerate(length)
    ]


def ranked_episode(episodes: list[Episode], which: str = "best") -> int:
    """Index of the 'best' (highest score, then return) or the 'worst' episode (lowest); the earlier one on a full tie."""
    if which not in ("best", "worst"):
        raise ValueError(f"which={which!r} must be 'best' or 'worst'")

    def key(i: int) -> tuple[float, float]:
        return episodes[i].score, episodes[i].ret

    return max(range(len(episodes)), key=key) if which == "best" else min(range(len(episodes)), key=key)


def summarize(episodes: list[Episode], num_actions: int, action_names: list[str]) -> dict:
    """A JSON-ready summary: counts, score, return and length statistics, and action counts and fractions by name."""
    if not episodes:
        raise ValueError("summarize() needs at least one episode")
    if len(action_names) != num_actions:
        raise ValueError(f"{len(action_names)} action names for {num_actions} actions")
    counts = np.zeros(num_actions, np.int64)
    for e in episodes:
        counts += np.bincount(e.actions, minlength=num_actions)[:num_actions]
    steps = int(sum(e.length for e in episodes))
    scores, rets = [e.score for e in episodes], [e.ret for e in episodes]
    successes = sum(e.success for e in episodes)
    mean, median = statistics.fmean, statistics.median
    out: dict[str, Any] = {"episodes": len(episodes), "steps": steps, "score_mean": float(mean(scores))}
    out |= {"score_median": float(median(scores)), "score_max": float(max(scores)), "score_min": float(min(scores))}
    out |= {"successes": int(successes), "success_rate": successes / len(episodes), "return_mean": float(mean(rets))}
    out |= {"return_min": float(min(rets)), "return_max": float(max(rets))}
    out["length_mean"] = float(mean(e.length for e in episodes))
    out["action_counts"] = {name: int(c) for name, c in zip(action_names, counts)}
    out["action_fractions"] = {name: (float(c) / steps if steps else 0.0) for name, c in zip(action_names, counts)}
    return out


def episode_record(e: Episode) -> dict:
    """The per-episode JSON entry (no actions): score, success, return, length, and noops after a no-op start."""
    record = {"score": e.score, "success": e.success, "return": e.ret, "length": e.length}
    return record if e.noops is None else record | {"noops": e.noops}


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
