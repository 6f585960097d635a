"""Evaluation episodes: whole episodes played with a fixed policy (epsilon-greedy on a network, random, or one
action held), and their summary.

All randomness comes from the ``seed`` and Mario is deterministic given the actions, so a pure-greedy Mario episode
always repeats.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from shared.config import EnvConfig, NetConfig
from shared.envs import entry_for, env_spec, make_env, make_vector_env
from shared.envs.frames import FrameStacker
from shared.errors import check
from shared.exploration import EpsilonGreedy
from shared.network import build_q_network
from shared.wire.protocol import action_dtype

POLICIES = ("greedy", "random", "constant")
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


def build_network(env_cfg: EnvConfig, state_dict: dict | None = None, net_cfg: NetConfig | None = None) -> torch.nn.Module:
    """A CPU Q-network for ``env_cfg`` shaped by ``net_cfg`` (None: the defaults) in eval mode, loaded with ``state_dict``
    if given (``_orig_mod.`` prefixes accepted)."""
    shape = net_cfg or NetConfig()
    net = build_q_network(env_spec(env_cfg), dueling=shape.dueling)
    if state_dict is not None:
        net.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in state_dict.items()})
    return net.eval()


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
    check(policy in POLICIES, "policy", policy, f"must be one of {POLICIES}")
    check(episodes >= 1, "episodes", episodes, "must be >= 1")
    check(0.0 <= epsilon <= 1.0, "epsilon", epsilon, "must be in [0, 1]")
    check(isinstance(noop_max, int) and noop_max >= 0, "noop_max", noop_max, "must be an integer >= 0")
    greedy, constant = policy == "greedy", policy == "constant"
    check(not greedy or net is not None, "policy", policy, "needs a network")
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
    eps = np.array([float(epsilon) if greedy or constant else 1.0])
    chooser = EpsilonGreedy(np.random.default_rng(seed), num_actions)
    env = make_env(env_cfg, seed)
    stacker = FrameStacker(env_cfg.stack, env.frame_shape)
    obs_t = torch.from_numpy(stacker.array).unsqueeze(0)  # shares memory: follows every push
    held = np.eye(num_actions, dtype=np.float32)[[cast(int, action) if constant else 0]]  # the held action as a one-hot "Q"
    exploit = (lambda: cast("torch.nn.Module", net)(obs_t).numpy()) if greedy else (lambda: held)
    out: list[Episode] = []
    try:
        with torch.inference_mode():
            for i in range(episodes):
                stacker.reset(env.reset())
                step, push, choose = env.step, stacker.push, chooser.choose
                actions = bytearray()  # np.frombuffer below: no copy, a new bytearray per episode
                ret, score, success, done = 0.0, 0.0, False, False
                drawn = None if noops is None else noops[i]
                still = drawn or 0  # no-op steps left at the start
                while not done:
                    if still:
                        a, still = noop, still - 1
                    else:
                        a = int(choose(eps, exploit)[0][0])
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
    policy = EpsilonGreedy(np.random.default_rng(seed), spec.num_actions)
    n = episodes
    ret, length = np.zeros(n), np.zeros(n, np.int64)
    score, success = np.zeros(n), np.zeros(n, bool)
    active = np.ones(n, bool)
    taken: list[np.ndarray] = []
    mask, eps_all = None, np.full(n, eps)
    starts = None if noops is None else np.asarray(noops, np.int64)
    try:
        obs = env.reset()
        stacks = np.repeat(obs[:, None], spec.stack, 1) if spec.stack > 1 else obs  # as the actors stack (an image Gymnasium env)
        with torch.inference_mode():
            while active.any():
                mask = env.action_mask() if spec.masked else None
                starting = np.zeros(n, bool) if starts is None else length < starts  # no-op start: noop, else random
                exploit = lambda x=stacks: cast("torch.nn.Module", net)(torch.from_numpy(x)).numpy()  # noqa: E731
                actions, _ = policy.choose(np.where(starting, 1.0, eps_all), exploit, mask)
                actions = np.where(starting & (True if mask is None else mask[:, noop]), noop, actions)
                obs, reward, terminated, truncated, info = env.step(actions)
                if spec.stack > 1:  # an ended env's row is the next episode's, but its episode is over: never read again
                    stacks = np.concatenate([stacks[:, 1:], obs[:, None]], 1)
                else:
                    stacks = obs
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
    check(which in ("best", "worst"), "which", which, "must be 'best' or 'worst'")

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
