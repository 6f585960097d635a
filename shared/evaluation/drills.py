"""Drills: each hazard of a level practised from a saved state just before it, a per-hazard pass rate in minutes.

A fixed *reference* episode spans the level: the env's probe action (Mario: right+A) with 5% uniform random presses,
the first of the seeded tries k = 0, 1, ... that succeeds (else the furthest of ``REFERENCE_TRIES``). A *drill point*
is its state ``lead`` agent steps before it first reaches a hazard's lo (levels without named hazards: one every
``SPACING`` of score, ``x256``, ``x512``, ...), kept with the stacked frames there. A *trial* restores a point and plays
the policy until the score reaches the hazard's hi or the episode succeeds (a pass) or the episode ends (a fail); the
*forced* variant makes one uniform random press at a random step in [0, lead). Each trial draws from a stream of its
own (the drill seed, the point, the variant, the trial), so the figures do not depend on order or processes. The
product of the plain pass rates is the success rate the drills predict, when the reference succeeded.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from shared.config import EnvConfig, NetConfig
from shared.envs import check_env, entry_for, env_spec, make_env
from shared.envs.frames import FrameStacker
from shared.errors import ConfigError, check, is_int
from shared.evaluation.episodes import POLICIES, Episode, build_network, play_episodes
from shared.evaluation.protocol import run_jobs, wilson_interval
from shared.evaluation.result import Drill, Drills
from shared.exploration import EpsilonGreedy
from shared.seeding import stream_seed

__all__ = ["LEAD", "DrillPoint", "Reference", "drill_points", "format_drills", "play_drills", "reference", "wilson_interval"]

LEAD = 12  # agent steps from a point's state to its hazard's lo (48 emulator frames on Mario: under a second)
REFERENCE_EPSILON = 0.05  # the reference's random presses around the probe action
REFERENCE_TRIES = 50
REFERENCE_STREAM = 0x64726C6C  # "drll": the reference tries' streams; on Mario 1-1 its first try reaches the flag
SPACING = 256  # score between points on levels without named hazards


@dataclass(frozen=True)
class Reference:
    """The level's reference episode: the try ``k`` that was kept and its env and policy seed."""

    k: int
    seed: int
    episode: Episode


@dataclass(frozen=True, eq=False)
class DrillPoint:
    """Where a point's trials start: a state of the reference and the agent's stacked frames there."""

    name: str
    lo: float
    hi: float  # a trial passes at a score >= hi (or a success)
    t: int  # the state's agent step in the reference
    x: float  # the reference's score at the state (0 at the true start)
    lead: int  # steps the reference took from the state to a score >= lo
    state: Any  # the env's save_state(): restorable on any env built alike
    stack: np.ndarray  # uint8 [stack, H, W]: the observation at the state


def _key(env_cfg: EnvConfig) -> tuple:
    """What decides the reference: the checked config's shared fields and the played env's own options (as JSON)."""
    entry, cfg = check_env(env_cfg)
    own = cfg.options.get(entry.name)
    own = dataclasses.asdict(own) if dataclasses.is_dataclass(own) and not isinstance(own, type) else own
    return cfg.name, cfg.module, cfg.frame_skip, cfg.frame_size, cfg.stack, cfg.max_episode_steps, json.dumps(own, sort_keys=True)


def _config(key: tuple) -> EnvConfig:
    name, module, skip, size, stack, cap, own = key
    return EnvConfig(name, module, skip, size, stack, cap, {} if own == "null" else {name: json.loads(own)})


def reference(env_cfg: EnvConfig) -> Reference:
    """``env_cfg``'s reference episode (the module docstring), computed once per process."""
    return _reference(_key(env_cfg))


@functools.lru_cache(maxsize=8)
def _reference(key: tuple) -> Reference:
    cfg = _config(key)
    entry = entry_for(cfg)
    probe = None if entry.probe_action is None else int(entry.probe_action(cfg))  # None: random play
    kept: Reference | None = None
    for k in range(REFERENCE_TRIES):
        seed = stream_seed(REFERENCE_STREAM, k)
        if probe is None:
            (e,) = play_episodes(None, cfg, 1, 1.0, seed, policy="random")
        else:
            (e,) = play_episodes(None, cfg, 1, REFERENCE_EPSILON, seed, policy="constant", action=probe)
        if e.success:
            return Reference(k, seed, e)
        if kept is None or e.score > kept.episode.score:
            kept = Reference(k, seed, e)
    return cast(Reference, kept)


def drill_points(env_cfg: EnvConfig, lead: int = LEAD, spacing: int = SPACING) -> list[DrillPoint]:
    """The drill points of ``env_cfg``'s level ``lead`` steps before each hazard the reference reaches (without named
    hazards: every ``spacing`` of score), computed once per process by replaying the reference; ConfigError names a bad
    value or an env without states."""
    check(is_int(lead) and lead >= 1, "lead", lead, "must be an integer >= 1")
    check(is_int(spacing) and spacing >= 1, "spacing", spacing, "must be an integer >= 1")
    entry = entry_for(env_cfg)
    if not entry.states or entry.make_single is None:
        raise ConfigError(f"env.name={env_cfg.name!r} cannot save its state (EnvEntry.states): drills need it")
    return list(_points(_key(env_cfg), int(lead), int(spacing)))


@functools.lru_cache(maxsize=8)
def _points(key: tuple, lead: int, spacing: int) -> tuple[DrillPoint, ...]:
    cfg, ref = _config(key), _reference(key)
    e = ref.episode
    pending = entry_for(cfg).hazards_of(cfg) or [
        (f"x{lo}", float(lo), float(lo + spacing)) for lo in range(spacing, int(e.score) + 1, spacing)
    ]
    env = make_env(cfg, ref.seed)
    stacker = FrameStacker(cfg.stack, env.frame_shape)
    ring: collections.deque = collections.deque(maxlen=lead)  # (t, x, state, stack) of the last ``lead`` steps
    points, x, steps = [], 0.0, 0
    try:
        stacker.reset(env.reset())
        for t, a in enumerate(e.actions.tolist()):
            ring.append((t, x, env.save_state(), stacker.array.copy()))
            frame, _, terminated, truncated, info = env.step(a)
            stacker.push(frame)
            x, steps = float(info["score"]), t + 1
            while pending and x >= pending[0][1]:  # first reached lo: the state ``lead`` steps back (or the start)
                name, lo, hi = pending.pop(0)
                t0, x0, state, stack = ring[0]
                points.append(DrillPoint(name, lo, hi, t0, x0, steps - t0, state, stack))
            if terminated or truncated:
                break
    finally:
        env.close()
    if steps != e.length or x != e.score:  # the env must be deterministic given its seed and the actions
        raise RuntimeError(f"the reference replayed to score {x:g} in {steps} steps, not {e.score:g} in {e.length}")
    return tuple(points)


def _trials(
    env: Any, net: torch.nn.Module | None, point: DrillPoint, job: dict, num_actions: int
) -> tuple[int, int]:  # fmt: skip
    """(passes, agent steps) of ``job['trials']`` trials of ``point`` on ``env`` in ``job``'s variant and policy."""
    depth, h, w = point.stack.shape
    stacker = FrameStacker(depth, (h, w))
    obs_t = torch.from_numpy(stacker.array).unsqueeze(0)  # shares memory: follows every push
    policy, forced = job["policy"], job["forced"]
    held = np.eye(num_actions, dtype=np.float32)[[job["action"] if policy == "constant" else 0]]  # a one-hot "Q"
    exploit: Callable[[], np.ndarray] = (lambda: cast(torch.nn.Module, net)(obs_t).numpy()) if net is not None else (lambda: held)
    eps = np.array([1.0 if policy == "random" else float(job["epsilon"])])
    seed = int(job["seed"]) & 0xFFFF_FFFF_FFFF_FFFF
    passes = steps = 0
    with torch.inference_mode():
        for k in range(job["trials"]):
            rng = np.random.default_rng([seed, job["index"], int(forced), k])  # this trial's stream
            press_at, press = (int(rng.integers(point.lead)), int(rng.integers(num_actions))) if forced else (-1, 0)
            choose = EpsilonGreedy(rng, num_actions).choose
            env.restore_state(point.state)
            stacker.array[:] = point.stack
            step, push, i = env.step, stacker.push, 0
            for i in itertools.count():
                a = press if i == press_at else int(choose(eps, exploit)[0][0])
                frame, _, terminated, truncated, info = step(a)
                push(frame)
                if info["success"] or info["score"] >= point.hi:
                    passes += 1
                    break
                if terminated or truncated:
                    break
            steps += i + 1
    return passes, steps


def drill_job(job: dict) -> dict:
    """Worker: one point's trials in one variant, on an env and network of its own (``job``: see ``play_drills``)."""
    torch.set_num_threads(1)  # batch-1 forwards: one core per worker
    net = build_network(job["env"], job["weights"], job["net"]) if job["policy"] == "greedy" else None
    env = make_env(job["env"], 0)
    try:
        passes, steps = _trials(env, net, job["point"], job, env_spec(job["env"]).num_actions)
    finally:
        env.close()
    return {"passes": passes, "steps": steps}


def play_drills(
    env_cfg: EnvConfig,
    trials: int,
    epsilon: float,
    seed: int,
    lead: int = LEAD,
    *,
    spacing: int = SPACING,
    policy: str = "greedy",
    net: torch.nn.Module | None = None,
    weights: dict | None = None,
    net_cfg: NetConfig | None = None,
    action: int | None = None,
    processes: int = 1,
) -> Drills:
    """``trials`` trials per drill point and variant with ``policy`` "greedy" (epsilon-greedy on ``net``, or on
    ``weights`` shaped by ``net_cfg``), "random" or "constant" (``action``), from the points ``drill_points(env_cfg,
    lead, spacing)``; in this process on one env, or in a pool of ``processes`` workers (then from ``weights``), one job
    per point and variant. ConfigError names a bad value."""
    started = time.perf_counter()
    check(policy in POLICIES, "policy", policy, f"must be one of {POLICIES}")
    check(is_int(trials) and trials >= 1, "trials", trials, "must be an integer >= 1")
    check(0.0 <= epsilon <= 1.0, "epsilon", epsilon, "must be in [0, 1]")
    num_actions = env_spec(env_cfg).num_actions
    check(policy != "greedy" or net is not None or weights is not None, "policy", policy, "needs a network (net or weights)")
    if policy == "constant":
        check(is_int(action) and 0 <= cast(int, action) < num_actions, "action", action, f"must be in [0, {num_actions})")
    points = drill_points(env_cfg, lead, spacing)
    common: dict[str, Any] = dict(env=env_cfg, policy=policy, action=action, epsilon=epsilon, seed=seed, trials=trials, lead=lead)
    jobs = [dict(common, index=i, forced=forced) for i in range(len(points)) for forced in (False, True)]
    if processes > 1 and len(jobs) > 1 and (policy != "greedy" or weights is not None):
        shipped = [dict(job, point=points[job["index"]], weights=weights, net=net_cfg) for job in jobs]  # states pickle
        got = run_jobs(shipped, processes, drill_job)
    else:  # one env for all: each point's emulator is parked once
        if policy == "greedy" and net is None:
            net = build_network(env_cfg, weights, net_cfg)
        env = make_env(env_cfg, 0)
        try:
            pairs = [_trials(env, net if policy == "greedy" else None, points[j["index"]], j, num_actions) for j in jobs]
        finally:
            env.close()
        got = [{"passes": p, "steps": s} for p, s in pairs]
    drills = []
    for p, plain, forced in zip(points, got[0::2], got[1::2]):
        a, b = plain["passes"], forced["passes"]
        drills.append(
            Drill(
                p.name, p.lo, p.hi, p.x, p.t, p.lead, trials, a, a / trials, list(wilson_interval(a, trials)),
                b, b / trials, list(wilson_interval(b, trials)), plain["steps"] + forced["steps"],
            )
        )  # fmt: skip
    ref = reference(env_cfg)
    e = ref.episode
    predicted = math.prod(d.pass_rate for d in drills) if e.success and drills else None
    row = {"try": ref.k, "success": e.success, "score": e.score, "length": e.length}
    return Drills(
        1.0 if policy == "random" else float(epsilon), trials, int(lead), int(seed), drills, predicted, row,
        round(time.perf_counter() - started, 1),
    )  # fmt: skip


def format_drills(d: Drills) -> list[str]:
    """The drills in lines: each point's plain and forced pass rates with their 95% intervals, then their product."""

    def rate(passes: int, ci: list[float]) -> str:
        return f"{passes / d.trials:4.0%} [{ci[0]:.0%}, {ci[1]:.0%}] ({passes}/{d.trials})"

    lines = [
        f"{p.name:<8} x {p.x:>6,.0f} (step {p.t:>3}, {p.lead} before {p.lo:,g}): "
        f"plain {rate(p.passes, p.pass_rate_ci)}, forced {rate(p.forced_passes, p.forced_pass_rate_ci)}"
        for p in d.points
    ]
    ref = d.reference
    if not d.points:
        lines.append(
            f"no drill points: the reference (try {ref.get('try')}) reached score {ref.get('score', 0):,g}, short of every one"
        )
    elif d.predicted_success_rate is None:
        lines.append(
            f"no prediction: the reference (try {ref.get('try')}) ended at score {ref.get('score', 0):,g} without success"
        )
    else:
        lines.append(f"product of the plain pass rates (the success rate the drills predict): {d.predicted_success_rate:.1%}")
    return lines
