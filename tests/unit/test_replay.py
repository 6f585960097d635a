"""FrameReplay against plain-Python references: gym FrameStack stacks and episode-level n-step returns."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest
import torch

from learner.replay.frame_ring import FrameReplay

SHAPE = (6, 5)  # small and non-square, so a transposed frame cannot pass


def make_frame(stream: int, slot: int, shape=SHAPE) -> np.ndarray:
    """A frame whose bytes are unique to (stream, slot)."""
    flat = (np.arange(shape[0] * shape[1]) * 7 + stream * 53 + slot * 11) % 256
    flat[0], flat[1], flat[2] = stream, slot % 256, slot // 256
    return flat.astype(np.uint8).reshape(shape)


class RefStream:
    """One stream's whole history as plain Python: random episodes, half terminated, half truncated.

    The stacks are built the way gym's FrameStack builds them on the env side: reset fills the
    stack with the reset frame, each step shifts left and appends the new frame.
    """

    def __init__(self, rng, stream: int, length: int, stack: int, max_episode: int = 9, p_term: float = 0.5):
        self.frames, self.action, self.reward, self.terminated, self.first = [], [], [], [], []
        self.ep_start, self.ep_end, self.ep_terminated = [], [], []
        while len(self.first) < length:
            m, term, start = int(rng.integers(1, max_episode + 1)), bool(rng.random() < p_term), len(self.first)
            for p in range(m):
                self.frames.append(make_frame(stream, start + p))
                self.action.append(int(rng.integers(0, 256)))
                self.reward.append(float(np.float32(rng.normal())))
                self.first.append(p == 0)
                self.terminated.append(term and p == m - 1)
                self.ep_start.append(start)
                self.ep_end.append(start + m - 1)
                self.ep_terminated.append(term)
        self.stacks = []
        window = collections.deque(maxlen=stack)
        for k, frame in enumerate(self.frames):
            for _ in range(stack if self.first[k] else 1):
                window.append(frame)
            self.stacks.append(np.stack(window))

    def nstep(self, i: int, n: int, gamma: float):
        """(reward, discount, steps, done) of a sample at slot i, or None if the step from i has no successor."""
        end = self.ep_end[i]
        available = end - i + (1 if self.ep_terminated[i] else 0)  # steps from i with a successor or a termination
        steps = min(n, available)
        if steps == 0:
            return None
        reward = sum(gamma**k * self.reward[i + k] for k in range(steps))
        done = self.ep_terminated[i] and i + steps - 1 == end
        return reward, (0.0 if done else gamma**steps), steps, done

    def is_truncation(self, k: int) -> bool:
        return k == self.ep_end[k] and not self.ep_terminated[k]


def write(replay: FrameReplay, stream0: int, refs: list[RefStream], start: int, T: int, as_torch: bool = False):
    """Write slots start..start+T-1 of refs (one lockstep group) to streams stream0.."""
    sl = slice(start, start + T)
    arrays = [
        np.stack([np.stack(r.frames[sl]) for r in refs]),
        np.array([r.action[sl] for r in refs], dtype=np.uint8),
        np.array([r.reward[sl] for r in refs], dtype=np.float32),
        np.array([r.terminated[sl] for r in refs], dtype=bool),
        np.array([r.first[sl] for r in refs], dtype=bool),
    ]
    if as_torch:
        arrays = [torch.from_numpy(a) for a in arrays]
    replay.add(stream0, *arrays)


def assert_row_matches(batch: dict, b: int, ref: RefStream, i: int, n_step: int, gamma: float) -> tuple[int, bool]:
    """Row b of a sample against the reference's slot i (n-step reward and discount, action, both stacks);
    returns the reference's (steps, done)."""
    out = ref.nstep(i, n_step, gamma)
    assert out is not None, f"slot {i} has no successor step but was sampled"
    reward, discount, steps, done = out
    assert batch["reward"][b].item() == pytest.approx(reward, abs=1e-5)
    assert batch["discount"][b].item() == pytest.approx(discount, abs=1e-6)
    assert int(batch["action"][b]) == ref.action[i]
    np.testing.assert_array_equal(batch["obs"][b].numpy(), ref.stacks[i])
    if not done:
        np.testing.assert_array_equal(batch["next_obs"][b].numpy(), ref.stacks[i + steps])
    return steps, done


def sampleable_range(h: int, C: int, stack: int, n: int) -> tuple[int, int]:
    lo = h - C + stack - 1 if h > C else 0
    return lo, h - 1 - n


# Uneven chunk sizes for two actors (two envs each): they include 1 and C = 37 and cross the wrap often.
CHUNKS_A = [5, 13, 1, 37, 22, 8, 30, 3, 36, 17, 2, 29, 11, 37, 6, 19, 33, 4, 25, 14, 9, 31, 7, 20, 12]
CHUNKS_B = [36, 2, 9, 21, 37, 1, 14, 28, 6, 33, 17, 3, 25, 11, 30, 8, 19, 35, 4, 23]


def fill_two_actors(replay, refs, check_each_add=None):
    """Write CHUNKS_A to streams 0-1 (numpy) and CHUNKS_B to streams 2-3 (torch), interleaved."""
    pos = [0, 0]
    for k in range(max(len(CHUNKS_A), len(CHUNKS_B))):
        for g, chunks in enumerate((CHUNKS_A, CHUNKS_B)):
            if k < len(chunks):
                write(replay, 2 * g, refs[2 * g : 2 * g + 2], pos[g], chunks[k], as_torch=(g == 1))
                pos[g] += chunks[k]
                if check_each_add is not None:
                    check_each_add()
    return pos


def test_stacks_match_gym_framestack_across_wraparound():
    stack, C = 4, 37
    rng = np.random.default_rng(1)
    refs = [RefStream(rng, s, 500, stack) for s in range(4)]
    replay = FrameReplay(4, 4 * C, frame_shape=SHAPE, stack=stack, n_step=3)
    checked = {"equal": 0, "overwritten": 0}

    def check():
        heads = replay.heads
        for s in range(4):
            h = int(heads[s])
            oldest = max(0, h - C)
            for k in range(oldest, h):
                needs = max(k - stack + 1, refs[s].ep_start[k])
                if needs >= oldest:
                    got = replay.stack_at(s, k)
                    assert got.dtype == torch.uint8 and tuple(got.shape) == (stack, *SHAPE)
                    np.testing.assert_array_equal(got.numpy(), refs[s].stacks[k], err_msg=f"stream {s} slot {k}")
                    checked["equal"] += 1
                else:
                    with pytest.raises(ValueError, match=f"abs_slot={k}"):
                        replay.stack_at(s, k)
                    checked["overwritten"] += 1

    heads = fill_two_actors(replay, refs, check)
    assert list(replay.heads) == [heads[0], heads[0], heads[1], heads[1]]
    assert min(heads) > 9 * C  # wrapped many times
    assert checked["equal"] > 5000 and checked["overwritten"] > 20


@pytest.mark.parametrize("n_step", [1, 3])
def test_sample_matches_nstep_reference(n_step):
    stack, C, gamma = 4, 37, 0.9
    rng = np.random.default_rng(10 + n_step)
    refs = [RefStream(rng, s, 500, stack) for s in range(4)]
    replay = FrameReplay(4, 4 * C, frame_shape=SHAPE, stack=stack, n_step=n_step, gamma=gamma)
    gen = torch.Generator().manual_seed(0)
    cases = collections.Counter()

    def check():
        heads = replay.heads
        if replay.num_sampleable() == 0:
            return
        batch = replay.sample(64, generator=gen)
        assert batch["obs"].dtype == batch["next_obs"].dtype == torch.uint8
        assert batch["action"].dtype == batch["stream"].dtype == batch["slot"].dtype == torch.int64
        assert batch["reward"].dtype == batch["discount"].dtype == torch.float32
        assert tuple(batch["obs"].shape) == tuple(batch["next_obs"].shape) == (64, stack, *SHAPE)
        for b in range(64):
            s, i = int(batch["stream"][b]), int(batch["slot"][b])
            lo, hi = sampleable_range(int(heads[s]), C, stack, n_step)
            assert lo <= i <= hi, (s, i, lo, hi)
            steps, done = assert_row_matches(batch, b, refs[s], i, n_step, gamma)
            if done:
                cases["terminated inside" if steps < n_step else "terminated at last step"] += 1
            else:
                cases["truncated inside" if steps < n_step else "full"] += 1

    fill_two_actors(replay, refs, check)
    assert cases["full"] > 100 and cases["terminated at last step"] > 20, cases
    if n_step > 1:
        assert cases["terminated inside"] > 20 and cases["truncated inside"] > 20, cases


def test_len_and_num_sampleable_are_exact():
    S, C, stack, n = 2, 10, 4, 3
    replay = FrameReplay(S, S * C + 1, frame_shape=SHAPE, stack=stack, n_step=n)  # the odd slot is dropped
    assert replay.capacity == S * C and replay.stream_capacity == C
    rng = np.random.default_rng(3)
    refs = [RefStream(rng, s, 100, stack, max_episode=50, p_term=1.0) for s in range(S)]
    assert len(replay) == 0 and replay.num_sampleable() == 0
    with pytest.raises(ValueError, match="n_step \\+ 1 = 4"):
        replay.sample(8)

    expected = [  # (slots added to both streams, len, sampleable per stream)
        (3, 6, 0),  # h=3: needs h >= n + 1
        (1, 8, 1),  # h=4: slot 0 only
        (6, 20, 7),  # h=10=C: slots 0..6
        (1, 20, 4),  # h=11: oldest=1, lo=1+3=4, hi=7
        (5, 20, 4),  # h=16: lo=9, hi=12; steady state C - stack - n + 1
        (10, 20, 4),  # h=26, one whole ring in one add
    ]
    h = 0
    for T, length, per_stream in expected:
        write(replay, 0, refs, h, T)
        h += T
        assert len(replay) == length, (h, len(replay))
        assert replay.num_sampleable() == S * per_stream, (h, replay.num_sampleable())
    assert list(replay.heads) == [26, 26]

    # A single stream advanced alone: stream 0 at h=30, stream 1 stays at h=26.
    write(replay, 0, refs[:1], h, 4)
    assert list(replay.heads) == [30, 26] and len(replay) == 20 and replay.num_sampleable() == 8


def test_sample_returns_exactly_the_valid_sampleable_slots():
    """Every valid sampleable slot is drawn and nothing else: not a truncation slot, not outside [lo, hi]."""
    S, C, stack, n = 2, 30, 4, 3
    rng = np.random.default_rng(4)
    refs = [RefStream(rng, s, 200, stack, max_episode=6, p_term=0.3) for s in range(S)]
    replay = FrameReplay(S, S * C, frame_shape=SHAPE, stack=stack, n_step=n)
    write(replay, 0, refs, 0, 25)
    write(replay, 0, refs, 25, 27)  # wraps: h=52, oldest=22
    h = 52
    lo, hi = sampleable_range(h, C, stack, n)
    valid = {(s, i) for s in range(S) for i in range(lo, hi + 1) if not refs[s].is_truncation(i)}
    truncations = {(s, i) for s in range(S) for i in range(lo, hi + 1) if refs[s].is_truncation(i)}
    assert len(truncations) >= 3 and replay.num_sampleable() == len(valid) + len(truncations)
    batch = replay.sample(6000, generator=torch.Generator().manual_seed(1))
    drawn = set(zip(batch["stream"].tolist(), batch["slot"].tolist()))
    assert drawn == valid
    assert batch["slot"].min().item() >= lo and batch["slot"].max().item() <= hi


def test_streams_are_drawn_in_proportion_to_their_sampleable_slots():
    S, C, n = 2, 500, 3
    rng = np.random.default_rng(5)
    refs = [RefStream(rng, s, 500, 4, max_episode=1000, p_term=0.0) for s in range(S)]  # one long episode
    replay = FrameReplay(S, S * C, frame_shape=SHAPE, n_step=n)
    write(replay, 0, refs[:1], 0, 403)  # 400 sampleable
    write(replay, 1, refs[1:], 0, 103)  # 100 sampleable
    assert replay.num_sampleable() == 500
    stream = replay.sample(50_000, generator=torch.Generator().manual_seed(2))["stream"]
    share = (stream == 0).float().mean().item()
    assert abs(share - 0.8) < 0.01, share
    assert set(stream.tolist()) == {0, 1}


def test_absolute_slot_zero_counts_as_first():
    replay = FrameReplay(1, 16, frame_shape=SHAPE, stack=4, n_step=1)
    T = 3
    frames = np.stack([make_frame(0, k) for k in range(T)])[None]
    replay.add(
        0, frames, np.zeros((1, T), np.uint8), np.zeros((1, T), np.float32), np.zeros((1, T), bool), np.zeros((1, T), bool)
    )  # no first flag at all
    f = frames[0]
    np.testing.assert_array_equal(replay.stack_at(0, 0).numpy(), np.stack([f[0]] * 4))
    np.testing.assert_array_equal(replay.stack_at(0, 2).numpy(), np.stack([f[0], f[0], f[1], f[2]]))
    batch = replay.sample(16, generator=torch.Generator().manual_seed(0))
    for b in range(16):
        i = int(batch["slot"][b])
        np.testing.assert_array_equal(batch["obs"][b].numpy(), replay.stack_at(0, i).numpy())
        np.testing.assert_array_equal(batch["next_obs"][b].numpy(), replay.stack_at(0, i + 1).numpy())


def test_sample_raises_when_no_draw_has_a_successor():
    replay = FrameReplay(1, 16, frame_shape=SHAPE, stack=2, n_step=1)
    T = 10  # every slot is its own truncated episode: no step has a successor
    replay.add(
        0,
        np.zeros((1, T, *SHAPE), np.uint8),
        np.zeros((1, T), np.uint8),
        np.zeros((1, T), np.float32),
        np.zeros((1, T), bool),
        np.ones((1, T), bool),
    )
    assert replay.num_sampleable() == T - 1
    with pytest.raises(RuntimeError, match="redraw"):
        replay.sample(4)


def test_concurrent_writer_and_sampler_see_consistent_data():
    S, C, stack, n = 2, 37, 4, 3
    rng = np.random.default_rng(6)
    refs = [RefStream(rng, s, 3000, stack) for s in range(S)]
    replay = FrameReplay(S, S * C, frame_shape=SHAPE, stack=stack, n_step=n)
    write(replay, 0, refs, 0, 10)
    done = threading.Event()

    def writer():
        h = 10
        for T in (CHUNKS_A * 6)[:150]:
            write(replay, 0, refs, h, T)
            h += T
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    samples = 0
    gen = torch.Generator().manual_seed(3)
    while not done.is_set() or samples == 0:
        batch = replay.sample(32, generator=gen)
        for b in range(32):
            s, i = int(batch["stream"][b]), int(batch["slot"][b])
            np.testing.assert_array_equal(batch["obs"][b].numpy(), refs[s].stacks[i])
            reward, discount, steps, _ = refs[s].nstep(i, n, 0.99)
            assert batch["reward"][b].item() == pytest.approx(reward, abs=1e-5)
            if discount > 0:
                np.testing.assert_array_equal(batch["next_obs"][b].numpy(), refs[s].stacks[i + steps])
        samples += 1
    thread.join()
    assert samples >= 2


def test_memory_per_transition():
    replay = FrameReplay(2, 64, frame_shape=(84, 84), stack=4, n_step=3)
    assert 84 * 84 <= replay.bytes_per_transition <= 8192
    assert replay.bytes_per_transition == 84 * 84 + 7
    assert replay.nbytes == replay.bytes_per_transition * 64


def _good(E=1, T=4, shape=SHAPE):
    return (
        np.zeros((E, T, *shape), np.uint8),
        np.zeros((E, T), np.uint8),
        np.zeros((E, T), np.float32),
        np.zeros((E, T), bool),
        np.ones((E, T), bool),
    )


def _with(index, value, E=1, T=4):
    args = list(_good(E, T))
    args[index] = value
    return args


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(num_streams=0, capacity=100), "num_streams=0"),
        (dict(num_streams=4, capacity=30), "capacity=30"),
        (dict(num_streams=1, capacity=100, stack=0), "stack=0"),
        (dict(num_streams=1, capacity=100, n_step=0), "n_step=0"),
        (dict(num_streams=1, capacity=100, gamma=1.5), "gamma=1.5"),
        (dict(num_streams=1, capacity=100, frame_shape=(84, 0)), "frame_shape=(84, 0)"),
        (dict(num_streams=1, capacity=100, frame_shape=(2, 2, 2, 2, 2)), "frame_shape=(2, 2, 2, 2, 2)"),
        (dict(num_streams=1, capacity=100, obs_dtype="float64"), "obs_dtype='float64'"),
        (dict(num_streams=1, capacity=100, num_actions=0), "num_actions=0"),
    ],
)
def test_constructor_rejects_bad_values(kwargs, needle):
    with pytest.raises(ValueError) as err:
        FrameReplay(**kwargs)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "stream0, args, needle",
    [
        (4, _good(), "stream0=4"),
        (-1, _good(), "stream0=-1"),
        (3, _good(E=2), "stream0=3"),
        (0, _with(0, np.zeros((1, 4, *SHAPE), np.float32)), "float32"),
        (0, _with(0, np.zeros((1, 4, 5, 6), np.uint8)), "(1, 4, 5, 6)"),
        (0, _with(1, np.zeros((1, 5), np.uint8)), "(1, 5)"),
        (0, _with(1, np.full((1, 4), 300, np.int64)), "max=300"),
        (0, _with(1, np.zeros((1, 4), np.float32)), "float32"),
        (0, _with(2, np.zeros((1, 4), np.int32)), "int32"),
        (0, _with(3, np.zeros((1, 4), np.uint8)), "uint8"),
        (0, _with(4, [[True] * 4]), "list"),
        (0, _good(T=17), "T=17"),
    ],
)
def test_add_rejects_bad_input_and_changes_nothing(stream0, args, needle):
    replay = FrameReplay(4, 64, frame_shape=SHAPE)  # C = 16
    with pytest.raises(ValueError) as err:
        replay.add(stream0, *args)
    assert needle in str(err.value)
    assert list(replay.heads) == [0, 0, 0, 0]


def test_lockstep_violation_and_bad_lookups_raise():
    replay = FrameReplay(4, 64, frame_shape=SHAPE)
    replay.add(1, *_good(E=1, T=4))
    with pytest.raises(ValueError, match="lockstep"):
        replay.add(0, *_good(E=2, T=4))  # stream 0 at 0, stream 1 at 4
    assert list(replay.heads) == [0, 4, 0, 0]
    with pytest.raises(ValueError, match="abs_slot=4"):
        replay.stack_at(1, 4)
    with pytest.raises(ValueError, match="stream=9"):
        replay.stack_at(9, 0)
    with pytest.raises(ValueError, match="batch_size=0"):
        replay.sample(0)


def add_slots(replay, stream, t, first_slot=False):
    """``t`` slots of frames filled with ``stream`` into ``stream``; ``first_slot``: the first starts an episode."""
    frames = np.full((1, t, 8, 8), stream, np.uint8)
    first = np.zeros((1, t), bool)
    first[0, 0] = first_slot
    replay.add(stream, frames, np.zeros((1, t), np.uint8), np.ones((1, t), np.float32), np.zeros((1, t), bool), first)


def test_a_dead_streams_data_expires_after_a_capacity_of_newer_data():
    replay = FrameReplay(num_streams=2, capacity=200, frame_shape=(8, 8), stack=2, n_step=1)
    add_slots(replay, 0, 50, True)
    add_slots(replay, 1, 50, True)
    assert replay.live_streams() == 2
    for _ in range(4):  # 200 more slots into stream 1 only: stream 0 is now older than a FIFO of 200 would hold
        add_slots(replay, 1, 50)
    assert replay.live_streams() == 1
    streams = replay.sample(512, generator=torch.Generator().manual_seed(0))["stream"]
    assert set(streams.tolist()) == {1}
    add_slots(replay, 0, 10)  # the slot's actor is back: its stream is sampled again
    assert replay.live_streams() == 2
    streams = replay.sample(2048, generator=torch.Generator().manual_seed(0))["stream"]
    assert set(streams.tolist()) == {0, 1}


# --- other env specs: any observation shape and dtype, stack 1, action masks ----------------------------


def test_mario_memory_per_transition_is_unchanged():
    assert FrameReplay(2, 64, frame_shape=(84, 84), stack=4, num_actions=7).bytes_per_transition == 84 * 84 + 7


@pytest.mark.parametrize(
    "shape,dtype,stack", [((14,), "float32", 1), ((3, 6, 5), "uint8", 1), ((4, 3), "float16", 2), ((2, 3, 4), "int8", 3)]
)
def test_any_shape_and_dtype_round_trips_exactly(shape, dtype, stack):
    """Stacks (or single observations at stack 1) and n-step returns equal the plain-Python reference."""
    rng = np.random.default_rng(7)
    S, C, n, gamma = 3, 40, 2, 0.9
    refs = [RefStream(rng, s, C, stack) for s in range(S)]
    obs = [np.stack([(rng.random(shape) * 100 - 50).astype(dtype) for _ in range(C)]) for _ in range(S)]
    replay = FrameReplay(S, S * C, frame_shape=shape, stack=stack, n_step=n, gamma=gamma, obs_dtype=dtype)
    for s, ref in enumerate(refs):
        replay.add(
            s,
            obs[s][None],
            np.array([ref.action[:C]], np.uint8),
            np.array([ref.reward[:C]], np.float32),
            np.array([ref.terminated[:C]]),
            np.array([ref.first[:C]]),
        )
    for s, ref in enumerate(refs):
        for k in range(C):
            window, cur = [], k
            for _ in range(stack):
                window.append(obs[s][cur])
                if not (ref.first[cur] or cur == 0):
                    cur -= 1
            want = np.stack(window[::-1]) if stack > 1 else obs[s][k]
            got = replay.stack_at(s, k).numpy()
            assert got.dtype == np.dtype(dtype) and np.array_equal(got, want), (s, k)
    batch = replay.sample(256, generator=torch.Generator().manual_seed(0))
    want_shape = (256, *shape) if stack == 1 else (256, stack, *shape)
    assert tuple(batch["obs"].shape) == want_shape == tuple(batch["next_obs"].shape)
    assert "next_mask" not in batch
    for b in range(256):
        s, i = int(batch["stream"][b]), int(batch["slot"][b])
        reward, discount, steps, _ = refs[s].nstep(i, n, gamma)
        assert float(batch["reward"][b]) == pytest.approx(reward, rel=1e-5, abs=1e-5)
        assert float(batch["discount"][b]) == pytest.approx(discount, rel=1e-6)
        assert np.array_equal(batch["next_obs"][b].numpy(), replay.stack_at(s, i + steps).numpy())


def test_masks_are_stored_per_slot_and_sampled_for_the_bootstrap():
    rng = np.random.default_rng(5)
    S, C, A, n = 2, 48, 1024, 3
    shape = (2, 32, 32)
    replay = FrameReplay(S, S * C, frame_shape=shape, stack=1, n_step=n, gamma=0.9, num_actions=A, masked=True)
    assert replay.bytes_per_transition == 2 * 32 * 32 + 4 + 2 + 2 + A // 8
    refs, masks = [], []
    for s in range(S):
        ref = RefStream(rng, s, 2 * C, 1)
        mask = rng.random((2 * C, A)) < 0.3
        actions = np.where(mask, rng.random(mask.shape), -1).argmax(1).astype(np.uint16)
        frames = rng.integers(0, 256, (2 * C, *shape), dtype=np.uint8)
        for half in range(2):  # the second add wraps the ring; packed masks once, bool masks once
            sl = slice(half * C, (half + 1) * C)
            m = mask[None, sl] if half else np.packbits(mask[None, sl], axis=-1, bitorder="little")
            replay.add(
                s,
                frames[None, sl],
                actions[None, sl],
                np.array([ref.reward[sl]], np.float32),
                np.array([ref.terminated[sl]]),
                np.array([ref.first[sl]]),
                masks=m,
            )
        refs.append((ref, actions))
        masks.append(mask)
    for s in range(S):
        for k in range(C, 2 * C):
            data = replay.slot_data(s, k)
            assert np.array_equal(data["mask"].numpy(), masks[s][k]) and data["action"] == refs[s][1][k]
    batch = replay.sample(128, generator=torch.Generator().manual_seed(1))
    assert batch["next_mask"].dtype == torch.bool and tuple(batch["next_mask"].shape) == (128, A)
    assert batch["action"].max() >= 256  # int16 storage keeps actions past 255
    for b in range(128):
        s, i = int(batch["stream"][b]), int(batch["slot"][b])
        _, _, steps, _ = refs[s][0].nstep(i, n, 0.9)
        assert np.array_equal(batch["next_mask"][b].numpy(), masks[s][i + steps])
        assert np.array_equal(batch["mask"][b].numpy(), masks[s][i])  # the valid actions at s itself
        assert int(batch["action"][b]) == refs[s][1][i]


def test_masked_replay_refuses_missing_or_wrong_masks():
    replay = FrameReplay(1, 64, frame_shape=(4,), stack=1, n_step=1, obs_dtype="float32", num_actions=10, masked=True)
    frames, flags = np.zeros((1, 4, 4), np.float32), np.zeros((1, 4), bool)
    args = (frames, np.zeros((1, 4), np.uint8), np.zeros((1, 4), np.float32), flags, flags)
    with pytest.raises(ValueError, match="masks are required"):
        replay.add(0, *args)
    with pytest.raises(ValueError, match="must be packed uint8"):
        replay.add(0, *args, masks=np.zeros((1, 4, 1), np.uint8))
    with pytest.raises(ValueError, match=r"actions must be in \[0, 10\)"):
        replay.add(0, frames, np.full((1, 4), 10, np.uint8), *args[2:], masks=np.ones((1, 4, 10), bool))
    with pytest.raises(ValueError, match="frames dtype torch.float64"):
        replay.add(0, frames.astype(np.float64), *args[1:], masks=np.ones((1, 4, 10), bool))
    plain = FrameReplay(1, 64, frame_shape=(4,), stack=1, n_step=1, obs_dtype="float32")
    with pytest.raises(ValueError, match="not masked"):
        plain.add(0, *args, masks=np.ones((1, 4, 10), bool))
