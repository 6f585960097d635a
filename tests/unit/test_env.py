"""Tests for the frame envs (shared/envs/mario.py, fake.py, frames.py): real Mario, the preprocessing on controlled
frames, FakeEnv, FrameStacker."""

from __future__ import annotations

import random
import subprocess
import sys

import cv2
import numpy as np
import pytest

from shared.config import ConfigError, EnvConfig
from shared.config_migration import read_config
from shared.envs import env_spec, make_env
from shared.envs.fake import FAKE_EPISODE_RANGE, FakeEnv, FakeOptions
from shared.envs.frames import FrameEnv, FrameStacker, Preprocess
from shared.envs.mario import ACTION_SETS, MarioOptions, make_mario_env, parse_stage
from tests.support.paths import ROOT

# --------------------------------------------------------------------------- helpers


def gray(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)


class FakeInner:
    """An inner env with scripted RGB frames and rewards, in the old Gym or the Gymnasium shape.

    Frame 0 is the reset screen; inner step j (1-based, counted across episodes) shows frames[j]
    and gives rewards[j]. ``end_at``: inner step numbers that end the episode (terminated, or
    truncated where ``truncate`` is set, both where it is 'both'; Gymnasium only). ``layout``: 'fresh' returns a new
    contiguous array each call; 'reused' one contiguous buffer rewritten in place; 'nes' one
    reversed view of a BGRx buffer rewritten in place, like nes-py's screen.
    """

    def __init__(self, frames, rewards, api="gym", end_at=(), truncate=False, layout="fresh", reset_takes_seed=False):
        self.frames, self.rewards, self.api = frames, rewards, api
        self.end_at, self.truncate, self.layout = set(end_at), truncate, layout
        self.j = 0
        self.steps = 0
        self.actions: list[int] = []
        self.seeds: list[int | None] = []
        self.closed = 0
        h, w, _ = frames[0].shape
        self._rgb = np.empty((h, w, 3), np.uint8)
        self._raw = np.full((h * w * 4,), 77, np.uint8)  # pad bytes 77: must not leak into gray
        self._view = self._raw.reshape(h, w, 4)[:, :, ::-1][:, :, 1:]
        if reset_takes_seed:
            self.reset = self._reset_seeded

    def _show(self, rgb):
        if self.layout == "fresh":
            return rgb.copy()
        if self.layout == "reused":
            self._rgb[:] = rgb
            return self._rgb
        self._view[:] = rgb
        return self._view

    def reset(self):
        self.seeds.append(None)
        obs = self._show(self.frames[self.j])
        return (obs, {}) if self.api == "gymnasium" else obs

    def _reset_seeded(self, seed=None, options=None):
        self.seeds.append(seed)
        obs = self._show(self.frames[self.j])
        return (obs, {}) if self.api == "gymnasium" else obs

    def step(self, action):
        self.actions.append(action)
        self.steps += 1
        self.j += 1
        obs = self._show(self.frames[self.j])
        r = self.rewards[self.j]
        end = self.j in self.end_at
        info = {"x_pos": np.int64(10 * self.j), "flag_get": np.bool_(end), "extra": "kept"}
        if self.api == "gymnasium":
            if self.truncate == "both":
                return obs, r, end, end, info
            return obs, r, end and not self.truncate, end and self.truncate, info
        return obs, r, end, info

    def close(self):
        self.closed += 1


def scripted(n=40, h=24, w=24, seed=0):
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)]
    rewards = [float(2 ** (j % 12)) for j in range(n)]  # distinct powers of two: sums are exact
    return frames, rewards


def wrap(inner, frame_skip=4, size=None, max_steps=0, num_actions=7, **kw):
    """Preprocess as Mario builds it (the furthest x_pos is the score) unless ``kw`` says otherwise."""
    size = size or inner.frames[0].shape[0]
    kw = {"score_kind": "furthest", **kw}
    return Preprocess(inner, num_actions, frame_skip, size, max_steps, score_key="x_pos", success_key="flag_get", **kw)


# --------------------------------------------------------------------------- real Mario


def test_mario_real_steps():
    cfg = EnvConfig(name="mario", options={"mario": MarioOptions(stage="1-1", actions="simple")})
    env = make_env(cfg, seed=3)
    try:
        assert isinstance(env, Preprocess) and isinstance(env, FrameEnv) and env.raw is not None
        assert env.num_actions == 7 and env.frame_shape == (84, 84)
        f0 = env.reset()
        assert f0.shape == (84, 84) and f0.dtype == np.uint8
        # the reset frame is exactly gray -> INTER_AREA of the emulator screen (checks the BGRA fast path)
        screen = env.raw.screen
        assert not screen.flags.c_contiguous  # nes-py's reversed view; else the fast path goes untested
        expect = cv2.resize(gray(screen), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(f0, expect)

        rnd = random.Random(0)
        frames = [f0]
        kept = [f0.copy()]
        xs, episode_start = [], 0
        for _ in range(50):
            a = 1 if rnd.random() < 0.7 else rnd.choice([2, 3, 4])
            f, r, term, trunc, info = env.step(a)
            assert f.shape == (84, 84) and f.dtype == np.uint8 and f.flags.c_contiguous
            assert isinstance(r, float) and isinstance(term, bool) and isinstance(trunc, bool)
            assert type(info["score"]) is float and type(info["success"]) is bool
            assert info["score"] == max(xs[episode_start:] + [info["x_pos"]])  # the episode's furthest x_pos so far
            for key in ("life", "time", "world", "stage"):
                assert key in info
            assert not np.shares_memory(f, frames[-1])
            frames.append(f)
            kept.append(f.copy())
            xs.append(info["x_pos"])
            if term or trunc:
                frames.append(env.reset())
                kept.append(frames[-1].copy())
                episode_start = len(xs)
        # returned frames are never rewritten by the env
        for f, k in zip(frames, kept):
            np.testing.assert_array_equal(f, k)
        distinct = {f.tobytes() for f in frames}
        assert len(distinct) > 20
        assert max(xs) > xs[0]  # mostly 'right': Mario moved
    finally:
        env.close()
    env.close()  # idempotent


def test_mario_action_sets_and_time_limit():
    cfg = EnvConfig(name="mario", options={"mario": MarioOptions(stage="1-1", actions="right_only")}, max_episode_steps=5)
    env = make_env(cfg, seed=0)
    try:
        assert env.num_actions == 5
        env.reset()
        for t in range(1, 6):
            _, _, term, trunc, _ = env.step(1)
            assert term is False
            assert trunc is (t == 5)
        with pytest.raises(RuntimeError):
            env.step(1)
        env.reset()
        _, _, term, trunc, _ = env.step(1)
        assert (term, trunc) == (False, False)
        with pytest.raises(ValueError, match="out of range"):
            env.step(5)
    finally:
        env.close()
    for name, n in (("simple", 7), ("complex", 12), ("right_only", 5)):
        assert env_spec(EnvConfig(options={"mario": MarioOptions(actions=name)})).num_actions == n


def _jumps_while_holding(jump_release: bool, action: int, steps: int) -> tuple[int, int]:
    """Take-offs (RAM 0x1D going 0 -> 1 while Mario is not dying, RAM 0x0E != 0x0B; checked every emulator frame)
    and final x while holding one action."""
    env = make_mario_env(
        EnvConfig(name="mario", options={"mario": MarioOptions(stage="1-1", actions="simple", jump_release=jump_release)}), 0
    )
    try:
        env.reset()
        inner_step, ram = env.inner.step, env.raw.ram
        take_offs, before = 0, int(ram[0x1D])

        def counting_step(a):
            nonlocal take_offs, before
            out = inner_step(a)
            now = int(ram[0x1D])
            take_offs += before == 0 and now == 1 and ram[0x0E] != 0x0B  # a death also sets 0x1D
            before = now
            return out

        env.inner.step = counting_step
        x = 0
        for _ in range(steps):
            _, _, terminated, truncated, info = env.step(action)
            x = info["score"]
            if terminated or truncated:
                break
        return take_offs, x
    finally:
        env.close()


def test_jump_release_rejumps_while_a_is_held():
    right_a_b = ACTION_SETS["simple"].index(["right", "A", "B"])
    held, x_held = _jumps_while_holding(False, right_a_b, 150)
    released, x_released = _jumps_while_holding(True, right_a_b, 150)
    assert held == 1  # SMB jumps only when A goes down: holding it gives one jump
    assert released >= 4, released  # released for one frame on landing: it jumps again, and again
    assert x_released > x_held + 200, (x_held, x_released)  # and clears the pipe the held run walks into
    right = ACTION_SETS["simple"].index(["right"])
    assert _jumps_while_holding(True, right, 60)[0] == 0  # no A asked, none pressed


def test_legacy_config_keeps_raw_buttons():
    import json

    from shared.config import RunConfig
    from shared.envs.mario import mario_options
    from shared.resolution import resolve_config

    data = json.loads(resolve_config(RunConfig()).to_json())
    assert data["env"]["mario"]["jump_release"] is True  # the default now
    data["env"]["stage"] = data["env"].pop("mario")["stage"]  # the flat layout, saved before the field existed:
    assert mario_options(read_config(json.dumps(data)).env).jump_release is False  # they played raw buttons


def test_the_run_header_names_the_button_set_and_jump_release():
    from launch.local import spec_line
    from shared.config import RunConfig
    from shared.envs import entry_for, env_spec

    def line(cfg: RunConfig) -> str:
        return spec_line(cfg, entry_for(cfg.env), env_spec(cfg.env))

    cfg = RunConfig()
    assert line(cfg).endswith("7 actions, nature net, simple buttons, jump release")
    cfg.env.options["mario"] = MarioOptions(actions="right_only", jump_release=False)
    assert line(cfg).endswith("5 actions, nature net, right_only buttons, raw buttons (no jump release)")
    cfg.env.name = "catch"  # an env without options of its own: the spec alone
    assert line(cfg).endswith("3 actions, nature net")


def test_action_sets_match_package():
    from gym_super_mario_bros import actions

    assert ACTION_SETS == {
        "right_only": actions.RIGHT_ONLY,
        "simple": actions.SIMPLE_MOVEMENT,
        "complex": actions.COMPLEX_MOVEMENT,
    }


def test_import_is_light_and_gym_notice_hidden():
    code = (
        "import sys; import shared.config, shared.envs.mario, learner.loop;"
        "assert 'gym' not in sys.modules and 'cv2' not in sys.modules, 'gym or cv2 imported';"
        "import shared.envs as e; from shared.config import EnvConfig; from shared.envs.mario import MarioOptions;"
        "env = e.make_env(EnvConfig(options={'mario': MarioOptions(stage='all')}), 0); env.reset(); env.step(0); env.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


# --------------------------------------------------------------------------- preprocessing, controlled frames


@pytest.mark.parametrize("api", ["gym", "gymnasium"])
def test_skip_max_and_reward_sum(api):
    frames, rewards = scripted()
    inner = FakeInner(frames, rewards, api=api)
    env = wrap(inner, frame_skip=4)
    g = [gray(f) for f in frames]
    np.testing.assert_array_equal(env.reset(), g[0])
    for k in range(2):  # agent step k uses inner frames 4k+1 .. 4k+4
        obs, r, term, trunc, info = env.step(3)
        a, b = 4 * k + 3, 4 * k + 4
        want = np.maximum(g[a], g[b])
        np.testing.assert_array_equal(obs, want)
        assert not np.array_equal(want, g[b])  # the max really mixes two frames ...
        assert not np.array_equal(want, np.maximum.reduce(g[4 * k + 1 : b + 1]))  # ... only the last two
        assert r == sum(rewards[4 * k + 1 : b + 1])
        assert (term, trunc) == (False, False)
        assert info["score"] == 10 * b and type(info["score"]) is float  # the inner x_pos only grows here
        assert info["success"] is False and info["extra"] == "kept"
    assert inner.actions == [3] * 8


def test_both_inner_apis_give_identical_outputs():
    frames, rewards = scripted(n=60)
    runs = []
    for api in ("gym", "gymnasium"):
        env = wrap(FakeInner(frames, rewards, api=api, end_at={7, 21}), frame_skip=3, size=12)
        out = [env.reset()]
        for _ in range(12):
            o, r, te, tr, info = env.step(1)
            out.append((o, r, te, tr, info["score"], info["success"]))
            if te or tr:
                out.append(env.reset())
        runs.append(out)
    a, b = runs
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(x[0], y[0])
            assert x[1:] == y[1:]
    assert sum(1 for x in a if not isinstance(x, np.ndarray) and x[2]) == 2  # both ends seen


def test_early_end_stops_skip():
    frames, rewards = scripted()
    g = [gray(f) for f in frames]
    # ends on the 2nd frame of agent step 2 (inner step 6): max of frames 5 and 6, two rewards
    inner = FakeInner(frames, rewards, end_at={6})
    env = wrap(inner, frame_skip=4)
    env.reset()
    env.step(0)
    obs, r, term, trunc, info = env.step(0)
    np.testing.assert_array_equal(obs, np.maximum(g[5], g[6]))
    assert r == rewards[5] + rewards[6]
    assert (term, trunc) == (True, False) and info["success"] is True
    assert inner.steps == 6
    with pytest.raises(RuntimeError):
        env.step(0)
    # ends on the first frame of an agent step: that single frame (no stale buffer mixed in)
    inner = FakeInner(frames, rewards, end_at={5})
    env = wrap(inner, frame_skip=4)
    env.reset()
    env.step(0)
    obs, r, term, _, _ = env.step(0)
    np.testing.assert_array_equal(obs, g[5])
    assert r == rewards[5] and term is True and inner.steps == 5


def test_frame_skip_one_and_resize():
    frames, rewards = scripted(h=48, w=40)
    env = wrap(FakeInner(frames, rewards), frame_skip=1, size=16)
    f0 = env.reset()
    np.testing.assert_array_equal(f0, cv2.resize(gray(frames[0]), (16, 16), interpolation=cv2.INTER_AREA))
    obs, r, *_ = env.step(0)
    assert obs.shape == (16, 16) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, cv2.resize(gray(frames[1]), (16, 16), interpolation=cv2.INTER_AREA))
    assert r == rewards[1]


@pytest.mark.parametrize("layout", ["reused", "nes"])
def test_reused_inner_buffers(layout):
    frames, rewards = scripted(n=30)
    ref = wrap(FakeInner(frames, rewards, layout="fresh"), frame_skip=2)
    env = wrap(FakeInner(frames, rewards, layout=layout), frame_skip=2)
    outs = [env.reset()]
    np.testing.assert_array_equal(outs[0], ref.reset())
    for _ in range(10):
        o, r, *_ = env.step(2)
        o_ref, r_ref, *_ = ref.step(2)
        np.testing.assert_array_equal(o, o_ref)
        assert r == r_ref
        assert not np.shares_memory(o, outs[-1])
        outs.append(o)
    kept = [o.copy() for o in outs]
    env.step(2)
    for o, k in zip(outs, kept):
        np.testing.assert_array_equal(o, k)


def test_time_limit_truncates():
    frames, rewards = scripted()
    env = wrap(FakeInner(frames, rewards), frame_skip=2, max_steps=3)
    env.reset()
    flags = [env.step(0)[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError):
        env.step(0)
    env.reset()  # the count restarts
    assert env.step(0)[2:4] == (False, False)
    # termination on the limit step is termination, not truncation
    env = wrap(FakeInner(frames, rewards, end_at={6}), frame_skip=2, max_steps=3)
    env.reset()
    flags = [env.step(0)[2:4] for _ in range(3)]
    assert flags[-1] == (True, False)
    # an inner (Gymnasium) truncation is passed on
    env = wrap(FakeInner(frames, rewards, api="gymnasium", end_at={3}, truncate=True), frame_skip=2)
    env.reset()
    env.step(0)
    assert env.step(0)[2:4] == (False, True)
    # both flags from the inner env: terminated wins (no bootstrap), they are never both True
    env = wrap(FakeInner(frames, rewards, api="gymnasium", end_at={3}, truncate="both"), frame_skip=2)
    env.reset()
    env.step(0)
    assert env.step(0)[2:4] == (True, False)


def test_seeding_reaches_inner():
    frames, rewards = scripted()
    inner = FakeInner(frames, rewards, api="gymnasium", reset_takes_seed=True)
    env = wrap(inner, seed=11)
    env.reset()
    env.reset()
    env.reset(seed=5)
    assert inner.seeds == [11, None, 5]
    got = []
    inner = FakeInner(frames, rewards)
    env = wrap(inner, seed=7, seed_fn=got.append)
    env.reset()
    env.reset(seed=8)
    env.reset()
    assert got == [7, 8] and inner.seeds == [None, None, None]
    env.close()
    env.close()
    assert inner.closed == 1


# --------------------------------------------------------------------------- FakeEnv


def _run_fake(env, steps, seed_actions=0):
    rnd = random.Random(seed_actions)
    out = [env.reset()]
    ends = []
    for _ in range(steps):
        f, r, te, tr, info = env.step(rnd.randrange(env.num_actions))
        out.append((f, r, te, tr, info["score"], info["success"]))
        if te or tr:
            ends.append((te, tr))
            out.append(env.reset())
    return out, ends


def test_fake_env_deterministic_unique_and_ending():
    cfg = EnvConfig(name="fake")
    a, ends = _run_fake(make_env(cfg, 42), 2000)
    b, _ = _run_fake(make_env(cfg, 42), 2000)
    c, _ = _run_fake(make_env(cfg, 43), 2000)
    frames = [x if isinstance(x, np.ndarray) else x[0] for x in a]
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(x[0], y[0])
            assert x[1:] == y[1:]
    assert frames[1].shape == (84, 84) and frames[1].dtype == np.uint8
    assert len({f.tobytes() for f in frames}) == len(frames)  # unique across steps and episodes
    frames_c = [x if isinstance(x, np.ndarray) else x[0] for x in c]
    assert not {f.tobytes() for f in frames} & {f.tobytes() for f in frames_c}
    header = np.stack([f.reshape(-1)[:16].view("<u8") for f in frames])
    np.testing.assert_array_equal(header[:, 0], np.arange(len(frames)))
    assert (header[:, 1] == 42).all()
    assert len(ends) >= 2000 // FAKE_EPISODE_RANGE[1] and all(te and not tr for te, tr in ends)
    rewards = {x[1] for x in a if not isinstance(x, np.ndarray)}
    assert rewards == {1.0, -0.1}
    assert any(x[5] for x in a if not isinstance(x, np.ndarray))  # some successes
    # episode lengths stay within the range
    lengths, t = [], 0
    for x in a[1:]:
        if isinstance(x, np.ndarray):
            lengths.append(t)
            t = 0
        else:
            t += 1
    assert lengths and FAKE_EPISODE_RANGE[0] <= min(lengths) and max(lengths) <= FAKE_EPISODE_RANGE[1]
    # frames are fresh arrays
    assert not np.shares_memory(frames[1], frames[2])


def test_fake_env_truncation_shapes_and_reseed():
    cfg = EnvConfig(name="fake", max_episode_steps=20, options={"fake": FakeOptions(actions=12)}, frame_size=48)
    env = make_env(cfg, 1)
    assert isinstance(env, FakeEnv) and isinstance(env, FrameEnv)
    assert env.num_actions == 12 and env.frame_shape == (48, 48)
    out, ends = _run_fake(env, 400)
    assert (False, True) in ends  # some truncated at 20 steps
    assert out[0].shape == (48, 48)
    with pytest.raises(ValueError):
        env.step(12)
    first = env.reset(seed=1)  # reseeding replays the sequence
    np.testing.assert_array_equal(first, out[0])
    for size in (5, 7):
        assert make_env(EnvConfig(name="fake", options={"fake": FakeOptions(actions=size)}), 0).num_actions == size


# --------------------------------------------------------------------------- FrameStacker


def test_frame_stacker():
    shape = (5, 6)
    f = [np.full(shape, i, np.uint8) for i in range(8)]
    s = FrameStacker(4, shape)
    arr = s.array
    assert arr.shape == (4, 5, 6) and arr.dtype == np.uint8
    s.reset(f[1])
    assert [int(x[0, 0]) for x in s.array] == [1, 1, 1, 1]
    s.push(f[2])
    assert [int(x[0, 0]) for x in s.array] == [1, 1, 1, 2]
    for i in (3, 4, 5):
        out = s.push(f[i])
    assert [int(x[0, 0]) for x in s.array] == [2, 3, 4, 5]
    assert out is s.array is arr  # one preallocated array, updated in place
    # full-content check with non-constant frames
    rng = np.random.default_rng(0)
    fr = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(6)]
    s.reset(fr[0])
    for x in fr[1:]:
        s.push(x)
    np.testing.assert_array_equal(s.array, np.stack(fr[-4:]))
    s1 = FrameStacker(1, shape)
    s1.reset(fr[0])
    s1.push(fr[1])
    np.testing.assert_array_equal(s1.array[0], fr[1])


# --------------------------------------------------------------------------- bad configuration


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(name="mario", options={"mario": MarioOptions(stage="9-9")}), "env.mario.stage='9-9'"),
        (dict(name="mario", options={"mario": MarioOptions(stage="1-5")}), "1-5"),
        (dict(name="mario", options={"mario": MarioOptions(stage="world1")}), "world1"),
        (dict(name="mario", options={"mario": MarioOptions(actions="bogus")}), "env.mario.actions='bogus'"),
        (dict(name="fake", options={"fake": FakeOptions(actions=0)}), "env.fake.actions=0"),
        (dict(name="pong"), "env.name='pong'"),
        (dict(name="mario", frame_skip=0), "frame_skip"),
        (dict(name="fake", frame_size=8), "frame_size"),
    ],
)
def test_bad_config_raises_naming_value(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        make_env(EnvConfig(**kwargs), 0)


def test_parse_stage():
    assert parse_stage("all") is None
    assert parse_stage("4-2") == (4, 2)
    with pytest.raises(ConfigError, match="0-1"):
        parse_stage("0-1")
    with pytest.raises(ConfigError, match="mario-stage"):
        make_mario_env(EnvConfig(name="mario", options={"mario": MarioOptions(stage="mario-stage")}), 0)


class StallingInner(FakeInner):
    """FakeInner whose ``x_pos`` on inner step j is ``xs[j - 1]``."""

    def __init__(self, xs, **kw):
        frames, rewards = scripted(n=len(xs) + 1)
        super().__init__(frames, rewards, **kw)
        self.xs = xs

    def step(self, action):
        obs, r, end, info = super().step(action)
        return obs, r, end, dict(info, x_pos=self.xs[self.j - 1])


@pytest.mark.parametrize("limit,truncated_at", [(3, 6), (4, 11), (0, None)])
def test_an_episode_without_a_new_furthest_score_for_that_many_steps_is_truncated(limit, truncated_at):
    xs = [10, 20, 30, 30, 25, 30, 31, 31, 31, 31, 31]  # steps 4-6 make no progress, 7 does, 8-11 do not
    env = wrap(StallingInner(xs), frame_skip=1, no_progress_steps=limit)
    env.reset()
    ends = []
    for step in range(1, len(xs) + 1):
        _, _, terminated, truncated, info = env.step(0)
        assert not terminated and info["score"] == max(xs[:step])  # the furthest so far
        if truncated:
            ends.append(step)
            break
    assert ends == ([truncated_at] if truncated_at else [])


def test_a_score_that_falls_is_reported_as_it_is_under_the_last_kind():
    """A game's return can fall (Boxing's did): score_kind 'last' reports the inner score as it is, 'furthest' its
    running maximum; an unknown kind is refused, naming it."""
    xs = [5, -1, -3, 2, -4]
    last = wrap(StallingInner(xs), frame_skip=1, score_kind="last")
    furthest = wrap(StallingInner(xs), frame_skip=1)
    last.reset(), furthest.reset()
    seen = [(last.step(0)[4]["score"], furthest.step(0)[4]["score"]) for _ in xs]
    assert seen == [(5.0, 5.0), (-1.0, 5.0), (-3.0, 5.0), (2.0, 5.0), (-4.0, 5.0)]
    with pytest.raises(ConfigError, match="score_kind='best' must be one of furthest, last"):
        wrap(StallingInner(xs), score_kind="best")
