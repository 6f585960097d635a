"""Any registered Gymnasium env with a Discrete action space as a warppipe env (``--env.name gym --env.gym.id ID``).

Image observations (a uint8 Box ``(H, W, 3)``, ``(H, W, 1)`` or ``(H, W)``) go through shared/envs/frames.py
``Preprocess`` (gray, ``env.frame_size`` square, ``env.frame_skip``, stacked ``env.stack`` deep) as Mario's do; vector
observations (a 1-D Box) are float32 ``(F,)`` with stack 1, for the MLP. Score: the episode's summed reward so far;
success: the env's ``info["is_success"]`` at any step of the episode (False for an env that gives none).
docs/envs/gym.md. gymnasium is an optional dependency (``pip install 'warppipe[gym]'``), imported only when the env's
spec or envs are built; this module (its options, for the command line) imports without it.

The module is not named ``gym.py``: that would shadow the old ``gym`` package Mario's emulator imports.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from shared.envs import EnvEntry, options, register
from shared.errors import ConfigError
from shared.spec import EnvSpec, checked_actions

if TYPE_CHECKING:
    from shared.config import EnvConfig

NAME = "gym"
RETURN_KEY = "warppipe_return"
"""The info key under which an image env's inner wrapper reports the episode's summed reward (Preprocess's score)."""
SUCCESS_KEY = "is_success"
"""Gymnasium's conventional info key for a success (goal-conditioned envs); absent: never a success."""


@dataclass
class GymOptions:
    """Any Gymnasium env (``--env.gym.*``) with a Discrete action space; ``env.max_episode_steps`` caps it on top of
    its own time limit (auto: 0, only the env's own)."""

    id: str = ""
    """Registered Gymnasium env id, gymnasium.make's first argument: 'CartPole-v1', 'ALE/Breakout-v5' (needs ale-py)."""
    kwargs: str = "{}"
    """Keyword arguments of gymnasium.make, as a JSON object: '{"frameskip": 1}'."""

    def validate(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigError(f"env.gym.id={self.id!r} must name a registered Gymnasium env (e.g. 'CartPole-v1')")
        make_kwargs(self.kwargs)

    def describe(self) -> str:
        """The env id and its kwargs in a few words (the run header)."""
        kw = make_kwargs(self.kwargs)
        return self.id + (f" {json.dumps(kw, sort_keys=True)}" if kw else "")


def make_kwargs(text: Any) -> dict[str, Any]:
    """``env.gym.kwargs`` parsed: a JSON object, else a ConfigError naming the value."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"env.gym.kwargs={text!r} must be a JSON object of gymnasium.make keywords ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"env.gym.kwargs={text!r} must be a JSON object of gymnasium.make keywords, e.g. '{{\"a\": 1}}'")
    return value


def _import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError:
        raise ConfigError("env.name='gym' needs gymnasium: pip install 'warppipe[gym]' (or 'gymnasium>=1.0')") from None
    return gymnasium


def make_gym(env_id: str, kwargs_text: str) -> Any:
    """``gymnasium.make(env_id, **kwargs)``; ALE ids import ale-py first (it registers its envs). ConfigError names an id
    Gymnasium does not know or kwargs the env does not take."""
    gymnasium = _import_gymnasium()
    kwargs = make_kwargs(kwargs_text)
    if env_id.split("/", 1)[0] == "ALE" and "/" in env_id:
        try:
            import ale_py
        except ImportError:
            raise ConfigError(f"env.gym.id={env_id!r} needs ale-py: pip install ale-py (or 'warppipe[ale]')") from None
        gymnasium.register_envs(ale_py)
    err = gymnasium.error
    unknown = (err.NameNotFound, err.NamespaceNotFound, err.VersionNotFound, err.DeprecatedEnv, err.UnregisteredEnv)
    try:
        return gymnasium.make(env_id, **kwargs)
    except unknown as exc:
        raise ConfigError(f"env.gym.id={env_id!r} is not a registered Gymnasium env ({exc})") from None
    except TypeError as exc:
        raise ConfigError(f"env.gym.kwargs={kwargs_text!r} are not keywords {env_id!r} takes ({exc})") from None


@dataclass(frozen=True)
class GymShape:
    """What an env id declares, read from one env: ``kind`` 'image' or 'vector', the observation's size (image: its
    channels), the actions (``start``: the Discrete space's first action) and their names."""

    kind: str
    size: int
    gray: bool
    num_actions: int
    start: int
    action_names: tuple[str, ...]


def classify(env_id: str, observation_space: Any, action_space: Any) -> tuple[str, int, bool, int, int]:
    """(kind, size, gray, num_actions, start) of the two spaces; ConfigError names a space warppipe cannot play."""
    gymnasium = _import_gymnasium()
    spaces = gymnasium.spaces
    if not isinstance(action_space, spaces.Discrete):
        raise ConfigError(f"env.gym.id={env_id!r} has action space {action_space}: warppipe plays a Discrete one only")
    num_actions, start = int(action_space.n), int(action_space.start)
    box = observation_space if isinstance(observation_space, spaces.Box) else None
    shape = tuple(box.shape) if box is not None else ()
    if box is not None and box.dtype == np.uint8 and (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3))):
        return "image", 3 if len(shape) == 3 and shape[2] == 3 else 1, len(shape) == 2 or shape[2] == 1, num_actions, start
    if box is not None and len(shape) == 1:
        return "vector", int(shape[0]), False, num_actions, start
    raise ConfigError(
        f"env.gym.id={env_id!r} has observation space {observation_space}: warppipe plays an image Box (uint8 (H, W, 3), "
        "(H, W, 1) or (H, W)) or a 1-D Box"
    )


@functools.lru_cache(maxsize=16)
def describe(env_id: str, kwargs_text: str) -> GymShape:
    """The spaces of ``env_id`` made with ``kwargs_text``, read from one env made and closed here (cached)."""
    env = make_gym(env_id, kwargs_text)
    try:
        kind, size, gray, n, start = classify(env_id, env.observation_space, env.action_space)
        meanings = getattr(env.unwrapped, "get_action_meanings", None)
        names = [str(m) for m in meanings()] if callable(meanings) else []
    finally:
        env.close()
    if len(names) != n or len(set(names)) != n:
        names = [str(start + a) for a in range(n)]
    return GymShape(kind, size, gray, n, start, tuple(names))


def _opts(cfg: EnvConfig) -> GymOptions:
    opts = options(cfg, NAME, GymOptions)
    opts.validate()
    return opts


def _shape(cfg: EnvConfig) -> GymShape:
    opts = _opts(cfg)
    return describe(opts.id, opts.kwargs)


def gym_spec(cfg: EnvConfig) -> EnvSpec:
    s = _shape(cfg)
    if s.kind == "image":
        return EnvSpec((cfg.frame_size, cfg.frame_size), "uint8", cfg.stack, s.num_actions, masked=False)
    return EnvSpec((s.size,), "float32", 1, s.num_actions, masked=False)


class _ImageInner:
    """One Gymnasium image env as ``Preprocess``'s inner env: RGB frames (gray ones converted), the Discrete space's
    offset added to actions, the episode's summed reward in ``info[RETURN_KEY]``, terminated winning over truncated."""

    def __init__(self, env: Any, start: int, gray: bool) -> None:
        self.env, self._start, self._gray, self._return = env, start, gray, 0.0

    def _rgb(self, obs: Any) -> np.ndarray:
        frame = np.asarray(obs)
        if self._gray:
            return cv2.cvtColor(np.ascontiguousarray(frame.reshape(frame.shape[:2])), cv2.COLOR_GRAY2RGB)
        return frame

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        self._return = 0.0
        return self._rgb(obs)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(self._start + int(action))
        self._return += float(reward)
        info = dict(info)
        info[RETURN_KEY] = self._return
        return self._rgb(obs), float(reward), bool(terminated), bool(truncated) and not terminated, info

    def close(self) -> None:
        self.env.close()


class GymVectorEnv:
    """E Gymnasium envs of 1-D observations stepped in a loop as a shared/spec.py vector env (same-step auto-reset).

    A plain loop, not ``gymnasium.vector.SyncVectorEnv``: that is a Python loop over its envs too, and this one keeps the
    score (the summed reward), ``is_success`` and ``env.max_episode_steps`` per env without reading its
    ``final_info`` masks or resetting one env of a Gymnasium vector env apart from the others."""

    def __init__(self, envs: list, spec: EnvSpec, start: int, seeds: Sequence[int], max_episode_steps: int = 0) -> None:
        if not envs or len(envs) != len(seeds):
            raise ConfigError(f"GymVectorEnv needs one seed per env, got {len(envs)} envs and {len(seeds)} seeds")
        self.envs, self.spec, self.num_envs = list(envs), spec, len(envs)
        self._start, self._limit = int(start), int(max_episode_steps)
        self._pending: list[int | None] = [int(s) for s in seeds]  # each env's first reset takes its seed
        n = self.num_envs
        self._return, self._t, self._success = np.zeros(n, np.float64), np.zeros(n, np.int64), np.zeros(n, bool)
        self._mask = np.ones((n, spec.num_actions), bool)
        self._started = self._closed = False

    def _reset_one(self, e: int, seed: int | None = None) -> np.ndarray:
        seed, self._pending[e] = self._pending[e] if seed is None else seed, None
        obs, _ = self.envs[e].reset(seed=seed)
        self._return[e], self._t[e], self._success[e] = 0.0, 0, False
        return np.asarray(obs, np.float32)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs = np.empty((self.num_envs, *self.spec.obs_shape), np.float32)
        for e in range(self.num_envs):
            obs[e] = self._reset_one(e, None if seed is None else seed + e)
        self._started = True
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = checked_actions(self._started, actions, self.num_envs)
        n = self.num_envs
        if not np.all((a >= 0) & (a < self.spec.num_actions)):
            raise ValueError(f"actions {a.tolist()!r} out of range [0, {self.spec.num_actions})")
        obs = np.empty((n, *self.spec.obs_shape), np.float32)
        reward = np.empty(n, np.float32)
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        score, success = np.empty(n, np.float64), np.empty(n, bool)
        for e, (env, action) in enumerate(zip(self.envs, a.tolist())):
            o, r, term, trunc, info = env.step(self._start + action)
            reward[e] = r
            self._return[e] += float(r)
            self._t[e] += 1
            self._success[e] |= bool(info.get(SUCCESS_KEY, False))
            score[e], success[e] = self._return[e], self._success[e]
            term = bool(term)
            trunc = not term and (bool(trunc) or (self._limit > 0 and self._t[e] >= self._limit))
            if term or trunc:
                terminated[e], truncated[e] = term, trunc
                obs[e] = self._reset_one(e)
            else:
                obs[e] = np.asarray(o, np.float32)
        return obs, reward, terminated, truncated, {"score": score, "success": success}

    def action_mask(self) -> np.ndarray:
        return self._mask.copy()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for env in self.envs:
                env.close()


def make_gym_single(cfg: EnvConfig, seed: int) -> Any:
    """One image env as a frames.py ``Preprocess`` (a ``FrameEnv``); ConfigError for an env of vector observations."""
    from shared.envs.frames import Preprocess

    opts, s = _opts(cfg), _shape(cfg)
    if s.kind != "image":
        raise ConfigError(f"env.gym.id={opts.id!r} has vector observations: it has no single frame env")
    return Preprocess(
        _ImageInner(make_gym(opts.id, opts.kwargs), s.start, s.gray),
        s.num_actions,
        cfg.frame_skip,
        cfg.frame_size,
        cfg.max_episode_steps,
        score_key=RETURN_KEY,
        success_key=SUCCESS_KEY,
        score_kind="last",
        seed=seed,
    )


def make_gym_vector(cfg: EnvConfig, seeds: Sequence[int]) -> Any:
    """The ``len(seeds)`` envs of one actor, env e seeded with ``seeds[e]`` at its first reset."""
    opts, s, spec = _opts(cfg), _shape(cfg), gym_spec(cfg)
    if s.kind == "image":
        from shared.envs.frames import FrameVectorEnv

        return FrameVectorEnv([make_gym_single(cfg, seed) for seed in seeds], spec)
    envs = [make_gym(opts.id, opts.kwargs) for _ in seeds]
    return GymVectorEnv(envs, spec, s.start, seeds, cfg.max_episode_steps)


ENTRY = register(
    EnvEntry(
        NAME,
        spec=gym_spec,
        make=make_gym_vector,
        action_names=lambda cfg: list(_shape(cfg).action_names),
        options_type=GymOptions,
        options=lambda cfg: _opts(cfg).describe(),
        score="Return",
        success="Success",
        random_reference=True,
        gamma=0.99,
        max_episode_steps=0,  # the env's own time limit (CartPole-v1: 500 steps)
    )
)
