"""The probe set: fixed states of an env, made deterministically, to measure a network on (learner/probe_figures.py).

A seeded scripted policy plays one env for ``n * every`` steps and every ``every``-th state is kept, stacked as the
actors stack them: the env's ``probe_action`` (Mario: right+A), a random valid action on a share ``explore`` of the
steps (only random ones without a ``probe_action``). Deterministic: the same arguments give the same array. A run
keeps its set in ``probe.npz`` (:func:`probe_set_cached`), fixed across resumes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shared.config import EnvConfig
from shared.envs import entry_for, env_label, env_spec, make_vector_env
from shared.exploration import EpsilonGreedy
from shared.spec import EnvSpec

__all__ = [
    "EVERY",
    "EXPLORE",
    "PROBE_NAME",
    "Play",
    "ProbeSet",
    "probe_set",
    "probe_set_cached",
    "scripted_play",
    "stack_frames",
]

PROBE_NAME = "probe.npz"
"""The probe set's file in a run folder."""
EXPLORE = 0.05
"""Share of the scripted policy's steps that take a random valid action (module docstring)."""
EVERY = 4
"""Steps between two kept states."""


@dataclass(frozen=True)
class Play:
    """``T`` steps of the scripted policy in the replay's slot layout (learner/replay/frame_ring.py), one env: slot t holds
    ``frames[t]``, the action chosen there, its reward and flags (a truncation: ``first[t + 1]`` without ``terminated[t]``)."""

    frames: np.ndarray
    """[T, *obs_shape] of the env's observation dtype."""
    actions: np.ndarray
    """int64 [T]."""
    rewards: np.ndarray
    """float32 [T], in game units."""
    terminated: np.ndarray
    """bool [T]."""
    first: np.ndarray
    """bool [T]; ``first[0]`` is True."""
    scores: np.ndarray
    """float64 [T]: the episode's score when ``frames[t]`` was seen (0 on a first frame; Mario: the furthest x_pos)."""
    masks: np.ndarray | None
    """bool [T, num_actions], the valid actions at ``frames[t]`` (masked envs); None: every action is valid."""

    def stacks(self, stack: int, index: np.ndarray | None = None) -> np.ndarray:
        """The network inputs at the slots ``index`` (default: all): :func:`stack_frames`."""
        return stack_frames(self.frames, self.first, stack, index)


@dataclass(frozen=True)
class ProbeSet:
    """A probe set: ``n`` states, their masks and where they were seen."""

    states: np.ndarray
    """[n, *spec.input_shape] of the env's observation dtype."""
    masks: np.ndarray | None
    """bool [n, num_actions], masked envs; None: every action is valid."""
    scores: np.ndarray
    """float64 [n]: the episode's score when the state was seen (Mario: the furthest x_pos so far)."""


def stack_frames(frames: np.ndarray, first: np.ndarray, stack: int, index: np.ndarray | None = None) -> np.ndarray:
    """``[len(index), stack, *obs_shape]`` (no stack axis for stack 1): at slot t the frames ``t - stack + 1 .. t``, those
    before the episode's first slot (slot 0 counts) replaced by that first frame, as replay and actors stack."""
    t_all = np.arange(len(frames))
    idx = t_all if index is None else np.asarray(index, dtype=np.int64)
    starts = np.where(first | (t_all == 0), t_all, 0)
    start = np.maximum.accumulate(starts)[idx]  # each slot's episode start
    if stack == 1:
        return frames[idx]
    offsets = np.arange(-stack + 1, 1)  # oldest first
    return frames[np.maximum(idx[:, None] + offsets, start[:, None])]


def scripted_play(env_cfg: EnvConfig, steps: int, seed: int = 0, explore: float = EXPLORE) -> Play:
    """``steps`` steps of the probe's scripted policy (module docstring) in one env seeded with ``seed``."""
    if steps < 1:
        raise ValueError(f"steps={steps!r} must be >= 1")
    if not 0.0 <= explore <= 1.0:
        raise ValueError(f"explore={explore!r} must be in [0, 1]")
    spec = env_spec(env_cfg)
    entry = entry_for(env_cfg)
    held = None if entry.probe_action is None else int(entry.probe_action(env_cfg))
    if held is not None and not 0 <= held < spec.num_actions:
        raise ValueError(f"env {entry.name!r}: probe_action {held} is not in [0, {spec.num_actions})")
    policy = EpsilonGreedy(np.random.default_rng(seed), spec.num_actions)
    hold = np.eye(spec.num_actions, dtype=np.float32)[[held or 0]]  # the held action as a one-hot "Q"
    frames = np.empty((steps, *spec.obs_shape), dtype=spec.obs_dtype)
    actions = np.empty(steps, np.int64)
    rewards = np.empty(steps, np.float32)
    terminated = np.zeros(steps, bool)
    first = np.zeros(steps, bool)
    scores = np.zeros(steps, np.float64)
    masks = np.empty((steps, spec.num_actions), bool) if spec.masked else None
    env = make_vector_env(env_cfg, [seed])
    try:
        obs = env.reset()
        first[0] = True
        for t in range(steps):
            frames[t] = obs[0]
            mask = None
            if masks is not None:
                mask = masks[t] = env.action_mask()[0]
            random = held is None or (mask is not None and not mask[held])  # nothing to hold: a random valid action
            a = int(
                policy.choose(np.array([1.0 if random else explore]), lambda: hold, None if mask is None else mask[None])[0][0]
            )
            obs, reward, term, trunc, info = env.step(np.array([a]))
            actions[t], rewards[t], terminated[t] = a, reward[0], term[0]
            if t + 1 < steps:
                ended = bool(term[0] or trunc[0])
                first[t + 1] = ended
                scores[t + 1] = 0.0 if ended else float(info["score"][0])
    finally:
        env.close()
    return Play(frames, actions, rewards, terminated, first, scores, masks)


def probe_set(env_cfg: EnvConfig, n: int = 256, seed: int = 0, every: int = EVERY, explore: float = EXPLORE) -> ProbeSet:
    """``n`` states of ``n * every`` steps of :func:`scripted_play`, every ``every``-th (the first is the reset state)."""
    if n < 1 or every < 1:
        raise ValueError(f"n={n!r} and every={every!r} must be >= 1")
    play = scripted_play(env_cfg, n * every, seed, explore)
    index = np.arange(n) * every
    spec = env_spec(env_cfg)
    masks = None if play.masks is None else play.masks[index]
    return ProbeSet(play.stacks(spec.stack, index), masks, play.scores[index])


def _check_matches(path: str, got: ProbeSet, spec: EnvSpec, n: int) -> None:
    want = (n, *spec.input_shape)
    if got.states.shape != want or got.states.dtype != np.dtype(spec.obs_dtype):
        raise ValueError(
            f"{path} holds {got.states.dtype} {got.states.shape} probe states, this run asks for {spec.obs_dtype} {want} "
            f"(the run's probe set is fixed: remove the file to draw a new one)"
        )
    if (got.masks is not None) != spec.masked:
        raise ValueError(f"{path}: its states {'have' if got.masks is not None else 'lack'} action masks, the env's do not")


def probe_set_cached(run_dir: str, env_cfg: EnvConfig, n: int = 256, seed: int = 0) -> ProbeSet:
    """The run's probe set: ``run_dir``'s ``probe.npz``, else :func:`probe_set` written there atomically; a file of another
    size or shape (a run resumed with another env or ``n``) is a ValueError."""
    path = os.path.join(run_dir, PROBE_NAME)
    spec = env_spec(env_cfg)
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as saved:
            got = ProbeSet(saved["states"], saved["masks"] if "masks" in saved.files else None, saved["scores"])
        _check_matches(path, got, spec, n)
        return got
    got = probe_set(env_cfg, n, seed)
    arrays = {"states": got.states, "scores": got.scores} | ({"masks": got.masks} if got.masks is not None else {})
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
        np.savez_compressed(f, **arrays, env=env_cfg.name, label=env_label(env_cfg), seed=seed, every=EVERY, explore=EXPLORE)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return got
