"""The evaluation role: play whole episodes with a fixed policy, summarise them, film one.

Used by ``python -m launch.evaluate`` and usable from an evaluation process during training
(hand :func:`play_episodes` the network the learner publishes; nothing here touches the data plane).

``play_episodes(net, env_cfg, episodes, epsilon, seed, policy, noop_max=0)``
    One env is built (``shared.envs.make_env``), reset for every episode, closed at the end. The
    policy is epsilon-greedy over ``net`` (``epsilon`` = 0: pure greedy; the network runs in
    ``eval()`` mode under ``torch.inference_mode`` on the one stacked observation, and only on
    steps that do not explore) or uniformly random (``policy="random"``, ``net`` may be None: the
    baseline a trained agent must beat). All randomness comes from ``np.random.default_rng(seed)``;
    the env is built with ``seed`` too. Mario itself is deterministic given the actions, so a
    pure-greedy Mario episode is the same every time. ``noop_max`` > 0: each episode starts with
    ``noop_counts(seed, episodes, noop_max)[i]`` steps of the env's no-op action (``EnvEntry.noop_action``;
    DQN Zoo's no-op starts), then the policy plays; those steps count in its length, return and score.
    Envs without a single-env form (Snake, fuel breaks: vector envs): ``episodes`` envs of one vector
    env play one episode each (one batched forward per step; greedy and random actions over the valid
    ones when masked).
``summarize(episodes, num_actions, action_names)``
    Plain dict (JSON-ready): score mean/median/max/min, success rate, return and length means and the
    action histogram keyed by readable names (:func:`action_names_for`, e.g. ``"right+A+B"``).
``record_video(env_cfg, actions, path, fps=60)``
    Replays an episode's actions on a fresh Mario emulator and writes every emulator frame at the
    game's own resolution, 256 wide x 240 high RGB: ``.mp4`` (H.264, yuv420p, plays in browsers)
    streamed to ffmpeg frame by frame, or ``.gif`` (every 4th frame, 15 fps). Returns a
    :class:`VideoInfo`; the replay must reach the episode's score (the emulator is deterministic).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from shared.config import EnvConfig
from shared.envs import action_names, entry_for, env_spec, make_env, make_vector_env
from shared.envs.frames import FrameStacker
from shared.network import build_q_network
from shared.wire.protocol import action_dtype

__all__ = [
    "Episode",
    "POLICIES",
    "VideoInfo",
    "action_names_for",
    "build_network",
    "noop_counts",
    "play_episodes",
    "ranked_episode",
    "record_video",
    "summarize",
]

POLICIES = ("greedy", "random", "constant")
GIF_EVERY = 4
"""A GIF keeps every 4th emulator frame (15 fps at 60): a quarter of the size, same duration."""
MACRO_BLOCK = 16
"""H.264 macro block: frames whose sides are multiples of it are encoded as they are (256x240 is)."""


@dataclass
class Episode:
    """One evaluation episode, scored as its env scores it (shared/envs/frames.py: ``info["score"]`` of its
    last step, ``info["success"]`` of any step; Mario: the furthest x_pos and the flag)."""

    score: float
    """The episode's score."""
    success: bool
    """The episode succeeded (Mario: reached the flag)."""
    ret: float
    """Return: the sum of rewards in game units (no clipping, no discount)."""
    length: int
    """Agent steps (each ``frame_skip`` emulator frames, fewer on the last one)."""
    actions: np.ndarray
    """uint8 [length] (uint16 past 256 actions): the action taken at each agent step, in order (replay it with
    record_video)."""
    noops: int | None = None
    """The no-op steps drawn for its start (``play_episodes``' ``noop_max``; fewer were played when the episode
    ended first); None: no no-op start."""


@dataclass
class VideoInfo:
    """What :func:`record_video` wrote."""

    path: str
    frames: int
    """Frames in the file: every emulator frame (mp4), every 4th (gif); the reset screen included."""
    emulator_frames: int
    """Emulator frames replayed, plus the reset screen."""
    seconds: float
    """Duration of the file (frames / its frame rate)."""
    score: float
    """The score the replay reached (equal to the episode's; checked when ``expected_score`` is given)."""
    bytes: int


# --------------------------------------------------------------------------- network


def build_network(env_cfg: EnvConfig, state_dict: dict | None = None, dueling: bool = True) -> torch.nn.Module:
    """A CPU Q-network for ``env_cfg``'s spec (``build_q_network``) in eval() mode, loaded with ``state_dict`` if
    given; ``dueling`` is the run's ``net.dueling`` (shared/config.py ``migrate`` sets it for old runs). Keys of a
    ``torch.compile``-wrapped module (``_orig_mod.`` prefix) are accepted."""
    net = build_q_network(env_spec(env_cfg), dueling=dueling)
    if state_dict is not None:
        state = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items()}
        net.load_state_dict(state)
    return net.eval()


def action_names_for(env_cfg: EnvConfig) -> list[str]:
    """Readable action names (the env's registry entry): Mario button lists joined with '+' (``"right+A+B"``)."""
    return action_names(env_cfg)


# --------------------------------------------------------------------------- playing

NOOP_STREAM = 0x6E6F6F70  # "noop": the key that separates the no-op counts' stream from the policy's


def noop_counts(seed: int, episodes: int, noop_max: int) -> list[int]:
    """The no-op steps each of ``episodes`` episodes played with ``seed`` starts with: uniform in [0, noop_max],
    from a stream of their own (``seed`` and :data:`NOOP_STREAM`), so they depend on nothing else: every policy and
    epsilon played on one seed gets the same no-op starts."""
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
    """Play ``episodes`` whole episodes on one env and return them (see the module docstring).

    ``policy="greedy"``: epsilon-greedy on ``net`` (a random action with probability ``epsilon``,
    else the argmax of Q; ties go to the lowest action). ``policy="random"``: uniformly random
    actions, ``net`` unused. ``policy="constant"``: ``action`` on every step but a random one with probability
    ``epsilon`` (the baseline "hold right+A"; Mario only). Episodes end at termination or truncation.
    ``noop_max`` > 0: episode i first plays ``noop_counts(seed, episodes, noop_max)[i]`` no-op steps (the env's
    ``noop_action``), fewer when it ends sooner; its ``noops`` says how many were drawn.
    The network is put in eval() mode (BatchNorm running statistics) and left there.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} must be one of {POLICIES}")
    if episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be >= 1")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon={epsilon!r} must be in [0, 1]")
    if not (isinstance(noop_max, int) and noop_max >= 0):
        raise ValueError(f"noop_max={noop_max!r} must be an integer >= 0")
    greedy = policy == "greedy"
    if greedy and net is None:
        raise ValueError("policy='greedy' needs a network")
    constant = policy == "constant"
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
    if greedy:  # greedy: net is not None (checked above), here and in the loop below
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
                actions = bytearray()
                ret, score, success, done = 0.0, 0.0, False, False
                still = noops[i] if noops is not None else 0  # no-op steps left at the start
                while not done:
                    if still:
                        a, still = noop, still - 1
                    elif eps >= 1.0 or (eps > 0.0 and draw() < eps):
                        a = int(pick(num_actions))
                    elif constant:  # constant: action is an int (checked above)
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
                    Episode(
                        float(score),
                        bool(success),
                        float(ret),
                        len(actions),
                        np.frombuffer(actions, np.uint8),  # no copy; a new bytearray per episode
                        None if noops is None else noops[i],
                    )
                )
    finally:
        env.close()
    return out


def _play_vector(
    net: torch.nn.Module | None,
    env_cfg: EnvConfig,
    episodes: int,
    eps: float,
    seed: int,
    noops: list[int] | None = None,
    noop: int = 0,
) -> list[Episode]:
    """One episode in each of ``episodes`` envs of one vector env, stepped together; env i's episode is the
    first it finishes. Exploring steps (all of them when ``net`` is None) take a uniformly random valid action.
    ``noops``: env i's first ``noops[i]`` steps take ``noop`` (a random valid action where a mask forbids it)."""
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
    return [
        Episode(
            float(score[i]),
            bool(success[i]),
            float(ret[i]),
            int(length[i]),
            np.ascontiguousarray(played[: length[i], i]),
            None if noops is None else noops[i],
        )
        for i in range(n)
    ]


def ranked_episode(episodes: list[Episode], which: str = "best") -> int:
    """Index of the 'best' episode (highest score, ties broken by the higher return) or the 'worst' (lowest
    score, then lower return); the earlier one on a full tie."""
    if which not in ("best", "worst"):
        raise ValueError(f"which={which!r} must be 'best' or 'worst'")

    def key(i: int) -> tuple[float, float]:
        return episodes[i].score, episodes[i].ret

    return max(range(len(episodes)), key=key) if which == "best" else min(range(len(episodes)), key=key)


def summarize(episodes: list[Episode], num_actions: int, action_names: list[str]) -> dict:
    """A JSON-ready summary of ``episodes``.

    Keys: episodes, steps (total agent steps), score_mean / score_median / score_max / score_min, successes
    (episodes that succeeded), success_rate (0..1), return_mean / return_min / return_max, length_mean,
    action_counts and action_fractions ({name: value} in action order; counts sum to steps, fractions to 1).
    """
    if not episodes:
        raise ValueError("summarize() needs at least one episode")
    if len(action_names) != num_actions:
        raise ValueError(f"{len(action_names)} action names for {num_actions} actions")
    counts = np.zeros(num_actions, np.int64)
    for e in episodes:
        counts += np.bincount(e.actions, minlength=num_actions)[:num_actions]
    steps = int(sum(e.length for e in episodes))
    scores = [e.score for e in episodes]
    rets = [e.ret for e in episodes]
    successes = sum(e.success for e in episodes)
    return {
        "episodes": len(episodes),
        "steps": steps,
        "score_mean": float(statistics.fmean(scores)),
        "score_median": float(statistics.median(scores)),
        "score_max": float(max(scores)),
        "score_min": float(min(scores)),
        "successes": int(successes),
        "success_rate": successes / len(episodes),
        "return_mean": float(statistics.fmean(rets)),
        "return_min": float(min(rets)),
        "return_max": float(max(rets)),
        "length_mean": float(statistics.fmean(e.length for e in episodes)),
        "action_counts": {name: int(c) for name, c in zip(action_names, counts)},
        "action_fractions": {name: (float(c) / steps if steps else 0.0) for name, c in zip(action_names, counts)},
    }


def episode_record(e: Episode) -> dict:
    """The per-episode JSON entry (no actions): score, success, return, length, and noops for an episode with a
    no-op start."""
    record = {"score": e.score, "success": e.success, "return": e.ret, "length": e.length}
    if e.noops is not None:
        record["noops"] = e.noops
    return record


# --------------------------------------------------------------------------- video


def _emulator_frames(env_cfg: EnvConfig, actions: np.ndarray, track: dict) -> Generator[np.ndarray, None, None]:
    """Replay ``actions`` on a fresh Mario env, yielding the reset screen and then every emulator frame.

    Each agent action is sent ``frame_skip`` times straight to ``env.inner`` (the JoypadSpace, or
    the jump-release pad around it), stopping early when the episode ends, exactly as the
    preprocessing does. Frames are the inner env's RGB observation (nes-py's ``raw.screen``, one
    buffer rewritten every frame): the consumer must use or copy each one before asking for the
    next. ``track`` receives the score (the max of the inner info's ``score_key``: Mario's x_pos, as the
    preprocessing scores it), steps replayed and whether the episode ended.
    """
    env = make_env(dataclasses.replace(env_cfg, max_episode_steps=0), 0)
    try:
        inner, skip, key = env.inner, env_cfg.frame_skip, env.score_key
        out = inner.reset()
        yield out[0] if isinstance(out, tuple) else out  # Gymnasium: (obs, info)
        best, steps, done = float("-inf"), 0, False
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
            steps += 1
            track.update(score=best, steps=steps, ended=done)
    finally:
        env.close()


def _padded(frame: np.ndarray, block: int) -> np.ndarray:
    """``frame`` as a contiguous array whose sides are multiples of ``block`` (black bottom/right padding)."""
    h, w = frame.shape[:2]
    ph, pw = -h % block, -w % block
    if ph or pw:
        return np.pad(frame, ((0, ph), (0, pw), (0, 0)))
    return np.ascontiguousarray(frame)


def _gif_durations_ms(fps: float, every: int) -> Iterator[int]:
    """Per-frame GIF delays in ms (multiples of 10: GIF stores centiseconds) whose running sum tracks
    the true timeline, so the GIF plays at game speed (4 frames at 60 fps: 70, 70, 60, ...)."""
    k = 0
    while True:
        a = round(k * every * 100 / fps)
        b = round((k + 1) * every * 100 / fps)
        yield 10 * (b - a)
        k += 1


def record_video(
    env_cfg: EnvConfig, actions: Iterable[int], path: str, fps: float = 60, expected_score: float | None = None
) -> VideoInfo:
    """Replay ``actions`` on a fresh Mario env and write the emulator's frames to ``path``.

    ``.mp4``: every emulator frame, 256x240 RGB as the NES draws it, H.264 (libx264) yuv420p via
    imageio's ffmpeg plugin, streamed to ffmpeg one frame at a time (memory stays flat); 256 and
    240 are multiples of the 16-pixel macro block, so imageio does not resize (other sizes would be
    padded black to the next multiple, never rescaled). ``.gif``: every 4th frame through Pillow (the
    encoder imageio's pillow plugin uses; frames are handed over one by one as an iterator, but
    Pillow assembles the GIF in memory, about 61 KB per kept frame), looping, at game speed.
    ``fps`` is the emulator's frame rate (NES: 60). Raises RuntimeError when the replay ends before
    the actions do or, given ``expected_score``, reaches another score (the file is written
    anyway); ValueError for an env other than Mario or another extension.
    """
    if not entry_for(env_cfg).video:
        raise ValueError(f"record_video needs an env that films (Mario), got env.name={env_cfg.name!r}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".mp4", ".gif"):
        raise ValueError(f"video path {path!r} must end in .mp4 or .gif")
    actions = np.asarray(list(actions) if not isinstance(actions, np.ndarray) else actions, dtype=np.int64)
    track: dict = {"score": 0.0, "steps": 0, "ended": False}
    frames = _emulator_frames(env_cfg, actions, track)
    emulated = written = 0
    if ext == ".mp4":
        import imageio.v2 as imageio

        writer = imageio.get_writer(
            path,
            format="FFMPEG",
            mode="I",
            fps=fps,
            codec="libx264",
            pixelformat="yuv420p",
            macro_block_size=MACRO_BLOCK,
            quality=None,
            output_params=["-crf", "18", "-movflags", "+faststart"],
            ffmpeg_log_level="error",
        )
        try:
            for frame in frames:
                writer.append_data(_padded(frame, MACRO_BLOCK))  # a contiguous copy of the shared screen
                emulated += 1
        finally:
            frames.close()  # the emulator, when the writer failed part-way
            writer.close()
        written = emulated
        seconds = written / fps
    else:
        from PIL import Image

        durations = _gif_durations_ms(fps, GIF_EVERY)
        total_ms = 0

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
            first = next(it)
            first.save(path, format="GIF", save_all=True, append_images=it, loop=0)
        finally:
            frames.close()
        seconds = total_ms / 1000.0
    info = VideoInfo(
        path=path,
        frames=written,
        emulator_frames=emulated,
        seconds=seconds,
        score=float(track["score"]),
        bytes=os.path.getsize(path),
    )
    if track["steps"] < len(actions):
        raise RuntimeError(f"replay ended after {track['steps']} of {len(actions)} actions (video {path} written)")
    if expected_score is not None and info.score != float(expected_score):
        raise RuntimeError(
            f"replay reached score {info.score:g}, the episode {float(expected_score):g} "
            f"(the emulator should be deterministic; video {path} written)"
        )
    return info
