"""The wire format: exact round-trips, and every kind of bad message rejected with its reason."""

import msgpack
import numpy as np
import pytest

from shared.wire import protocol

LIMITS = protocol.Limits(obs_shape=(84, 84), num_actions=7, max_envs=8, max_steps=128, max_message_bytes=1 << 22)
STATS = {k: 1.0 for k in protocol.STAT_KEYS}


def make_arrays(n_env=2, n_steps=5, seed=0):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (n_env, n_steps, 84, 84), dtype=np.uint8)
    actions = rng.integers(0, 7, (n_env, n_steps), dtype=np.uint8)
    rewards = rng.normal(size=(n_env, n_steps)).astype(np.float32)
    terminated = (rng.random((n_env, n_steps)) < 0.2).astype(np.uint8)
    first = (rng.random((n_env, n_steps)) < 0.2).astype(np.uint8)
    return frames, actions, rewards, terminated, first


def wire(parts):
    """What actually travels: independent byte strings."""
    return [bytes(memoryview(p)) for p in parts]


def good_parts(**overrides):
    """A valid batch of random content and non-zero ids and stats, with its arrays: the round trips compare what
    arrives with these (tests/support/messages.py's all-zero batch for a learner's sockets could not show a swap)."""
    arrays = make_arrays()
    return wire(protocol.encode_batch(3, 12345, 7, 2, *arrays, stats=STATS, run=(1 << 62) + 5)), arrays


def with_header(parts, **changes):
    header = msgpack.unpackb(parts[0], raw=False)
    header.update(changes)
    return [msgpack.packb(header, use_bin_type=True), *parts[1:]]


def test_round_trip_is_exact():
    parts, arrays = good_parts()
    batch = protocol.decode_batch(parts, LIMITS)
    assert (batch.actor, batch.incarnation, batch.seq, batch.weights_version) == (3, 12345, 7, 2)
    assert batch.run == (1 << 62) + 5  # the run of the weights that played it
    for name, sent, got in zip(
        protocol.ARRAY_NAMES, arrays, (batch.frames, batch.actions, batch.rewards, batch.terminated, batch.first)
    ):
        assert got.dtype == sent.dtype and got.shape == sent.shape, name
        assert np.array_equal(got, sent), name
    assert batch.num_transitions == 10
    assert batch.stats == STATS


def test_each_frame_is_sent_once_not_in_stacks():
    parts, arrays = good_parts()
    assert len(parts[1]) == arrays[0].size  # E*T frames of H*W bytes, nothing more


def test_encode_refuses_wrong_dtype():
    frames, actions, rewards, terminated, first = make_arrays()
    with pytest.raises(ValueError, match="rewards"):
        protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards.astype(np.float64), terminated, first, STATS)


def bad_messages():
    parts, _ = good_parts()
    header = msgpack.unpackb(parts[0], raw=False)
    yield "frame_count", parts[:-1]
    yield "size", parts[:1] + [parts[1][:-100]] + parts[2:]  # truncated frames
    yield "size", parts[:3] + [parts[3] + b"\0\0\0\0"] + parts[4:]  # reward array too long
    yield "header_msgpack", [parts[0][:-3]] + parts[1:]  # truncated msgpack
    yield "header_msgpack", [b"\xc1" * 10] + parts[1:]  # invalid msgpack byte
    yield "header_msgpack", [msgpack.packb({"v": 1, "kind": b"\xff\xfe"}, use_bin_type=False)] + parts[1:]  # non-UTF-8
    yield "header_msgpack", [msgpack.packb({1: 2})] + parts[1:]  # non-string key
    yield "header_msgpack", [msgpack.packb(msgpack.ExtType(5, b"xx"))] + parts[1:]
    yield "header_type", [msgpack.packb([1, 2, 3])] + parts[1:]
    yield "header_size", [b"\x00" * (protocol.MAX_HEADER_BYTES + 1)] + parts[1:]
    yield "version", with_header(parts, v=1)  # the previous protocol (no episodes frame)
    yield "kind", with_header(parts, kind="weights")
    yield "field", with_header(parts, extra=1)
    yield "field", with_header(parts, seq=-1)
    yield "field", with_header(parts, run=-1)
    yield "field", with_header(parts, run=1 << 63)
    yield "field", with_header(parts, E=1 << 32)  # absurd element count
    yield "field", with_header(parts, T=10_000)
    yield "shape", with_header(parts, shape=[96, 84])
    yield "shape", with_header(parts, shape=[84, 84, 1])
    yield "field", with_header(parts, shape=[84, 0])
    yield "field", with_header(parts, shape=84)
    yield "field", with_header(parts, shape=[1] * 5)
    yield "field", with_header(parts, M=1)  # masks for an unmasked env
    yield "size", with_header(parts, T=4)  # header/size mismatch
    yield "dtype", with_header(parts, dtypes=["<f4"] + header["dtypes"][1:])
    yield "stats", with_header(parts, stats={"steps": 1})
    yield "oversized", parts[:1] + [parts[1] * 200] + parts[2:]
    frames, actions, rewards, terminated, first = make_arrays()
    bad_action = actions.copy()
    bad_action[0, 0] = 7
    yield "values", wire(protocol.encode_batch(0, 1, 0, 0, frames, bad_action, rewards, terminated, first, STATS))
    bad_reward = rewards.copy()
    bad_reward[1, 2] = np.nan
    yield "values", wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, bad_reward, terminated, first, STATS))
    bad_flag = first.copy()
    bad_flag[0, 1] = 2
    yield "values", wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, bad_flag, STATS))
    episodes = np.array([[12.5, 310.0, 0.0, 0.0], [-3.0, 1200.0, 1.0, 2.0]], np.float32)
    good = wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, episodes))
    yield "field", with_header(good, K=frames.shape[0] * frames.shape[1] + 1)  # more episodes than steps
    prio = np.abs(rewards)
    for index, value in (((0, 0), np.nan), ((1, 3), -0.5), ((0, 4), np.inf)):  # NaN, negative, infinite
        bad = prio.copy()
        bad[index] = value
        yield (
            "values",
            wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, priorities=bad)),
        )
    with_prio = wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, priorities=prio))
    yield "size", with_header(with_prio, P=0)  # priorities the header denies
    yield "size", with_header(good, P=1)  # promised, not sent
    yield "size", with_prio[:-1] + [with_prio[-1][:-4]]  # one priority short
    yield "field", with_header(with_prio, P=2)
    yield "size", with_header(good, K=1)  # header/episodes size mismatch
    for row, col, value in ((0, 0, np.nan), (1, 1, np.inf), (1, 2, 0.5), (0, 3, 3.0)):  # NaN, inf, success 0.5, start 3
        bad = episodes.copy()
        bad[row, col] = value
        yield "values", wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, bad))


def test_episodes_round_trip_exactly():
    frames, actions, rewards, terminated, first = make_arrays()
    episodes = np.array([[12.5, 310.0, 0.0, 0.0], [-3.25, 1200.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    parts = wire(protocol.encode_batch(1, 2, 3, 4, frames, actions, rewards, terminated, first, STATS, episodes))
    assert len(parts) == 9
    batch = protocol.decode_batch(parts, LIMITS)
    np.testing.assert_array_equal(batch.episodes, episodes)
    none = protocol.decode_batch(
        wire(protocol.encode_batch(1, 2, 3, 4, frames, actions, rewards, terminated, first, STATS)), LIMITS
    )
    assert none.episodes.shape == (0, 4)


def test_priorities_round_trip_exactly_and_are_optional():
    frames, actions, rewards, terminated, first = make_arrays()
    prio = (np.abs(rewards) * 3).astype(np.float32)
    batch = protocol.decode_batch(
        wire(protocol.encode_batch(1, 2, 3, 4, frames, actions, rewards, terminated, first, STATS, priorities=prio)), LIMITS
    )
    assert batch.priorities.dtype == np.float32
    np.testing.assert_array_equal(batch.priorities, prio)
    none = protocol.decode_batch(
        wire(protocol.encode_batch(1, 2, 3, 4, frames, actions, rewards, terminated, first, STATS)), LIMITS
    )
    assert none.priorities is None
    with pytest.raises(ValueError, match="priorities"):
        protocol.encode_batch(1, 2, 3, 4, frames, actions, rewards, terminated, first, STATS, priorities=prio[:, :4])


def test_per_step_values_past_their_bounds_are_refused_naming_the_value():
    """A batch that would own the prioritized replay's mass, or overflow an n-step return, is refused at validation;
    values at the bound pass."""
    frames, actions, rewards, terminated, first = make_arrays()
    at_bound = np.full(rewards.shape, protocol.MAX_PRIORITY, np.float32)
    batch = protocol.decode_batch(
        wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, priorities=at_bound)),
        LIMITS,
    )
    assert batch.priorities.max() == protocol.MAX_PRIORITY
    poison = np.full(rewards.shape, 3e38, np.float32)
    parts = wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, rewards, terminated, first, STATS, priorities=poison))
    with pytest.raises(protocol.ProtocolError, match=r"priority 3e\+38 above the bound 1e\+06") as info:
        protocol.decode_batch(parts, LIMITS)
    assert info.value.reason == "values"
    huge = rewards.copy()
    huge[1, 0] = -2e6
    parts = wire(protocol.encode_batch(0, 1, 0, 0, frames, actions, huge, terminated, first, STATS))
    with pytest.raises(protocol.ProtocolError, match=r"reward of magnitude 2e\+06 above the bound 1e\+06"):
        protocol.decode_batch(parts, LIMITS)


@pytest.mark.parametrize("reason,parts", list(bad_messages()))
def test_bad_message_is_rejected_with_reason(reason, parts):
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_batch(parts, LIMITS)
    assert info.value.reason == reason


def test_random_bytes_never_escape_as_other_errors():
    rng = np.random.default_rng(1)
    parts, _ = good_parts()
    for i in range(2000):
        n = int(rng.integers(0, 8))
        junk = [rng.bytes(int(rng.integers(0, 64))) for _ in range(n)]
        if i % 2 and n == 6:
            junk[0] = parts[0]  # a valid header with garbage arrays
        with pytest.raises(protocol.ProtocolError):
            protocol.decode_batch(junk, LIMITS)


# --- other env specs: any obs shape and whitelisted dtype, uint16 actions, packed action masks ---

SNAKE = protocol.Limits(obs_shape=(14,), num_actions=3, obs_dtype="float32", max_envs=256, max_steps=64)
FUEL = protocol.Limits(obs_shape=(8, 32, 32), num_actions=1024, masked=True, max_envs=8, max_steps=64)


def fuel_arrays(n_env=3, n_steps=4, seed=0):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (n_env, n_steps, 8, 32, 32), dtype=np.uint8)
    mask = rng.random((n_env, n_steps, 1024)) < 0.5
    actions = np.where(mask, rng.random(mask.shape), -1).argmax(2).astype(np.uint16)
    rewards = rng.random((n_env, n_steps)).astype(np.float32)
    terminated = np.zeros((n_env, n_steps), np.uint8)
    first = np.zeros((n_env, n_steps), np.uint8)
    return (frames, actions, rewards, terminated, first), mask


def test_features_round_trip_exactly():
    rng = np.random.default_rng(3)
    frames = rng.random((8, 8, 14)).astype(np.float32)
    actions = rng.integers(0, 3, (8, 8), dtype=np.uint8)
    rewards = rng.normal(size=(8, 8)).astype(np.float32)
    flags = np.zeros((8, 8), np.uint8)
    parts = wire(protocol.encode_batch(0, 1, 2, 3, frames, actions, rewards, flags, flags, STATS))
    assert len(parts[1]) == frames.nbytes and len(parts[6]) == 0
    batch = protocol.decode_batch(parts, SNAKE)
    assert batch.frames.dtype == np.float32 and np.array_equal(batch.frames, frames)
    assert np.array_equal(batch.actions, actions) and batch.masks is None
    with pytest.raises(protocol.ProtocolError) as info:  # the same batch where Mario frames are expected
        protocol.decode_batch(parts, LIMITS)
    assert info.value.reason == "shape"
    with pytest.raises(protocol.ProtocolError) as info:  # right shape, another dtype
        protocol.decode_batch(parts, protocol.Limits(obs_shape=(14,), num_actions=3, max_envs=256, max_steps=64))
    assert info.value.reason == "dtype"


def test_masks_and_uint16_actions_round_trip_exactly():
    arrays, mask = fuel_arrays()
    packed = np.packbits(mask, axis=-1, bitorder="little")
    parts = wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=packed))
    header = msgpack.unpackb(parts[0], raw=False)
    assert header["shape"] == [8, 32, 32] and header["M"] == 1 and header["dtypes"][:2] == ["|u1", "<u2"]
    assert len(parts[6]) == 3 * 4 * 128
    batch = protocol.decode_batch(parts, FUEL)
    assert batch.actions.dtype == np.uint16 and np.array_equal(batch.actions, arrays[1])
    assert np.array_equal(batch.frames, arrays[0])
    assert np.array_equal(np.unpackbits(batch.masks, axis=-1, count=1024, bitorder="little").astype(bool), mask)


def bad_masked_messages():
    arrays, mask = fuel_arrays()
    packed = np.packbits(mask, axis=-1, bitorder="little")
    good = wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=packed))
    yield "field", with_header(good, M=0)  # masks the header denies
    yield "size", good[:6] + [b""] + good[7:]  # masked env, no masks
    yield "size", good[:6] + [good[6][:-1]] + good[7:]  # one byte short
    invalid = mask.copy()
    invalid[1, 2, arrays[1][1, 2]] = False  # the taken action is invalid
    yield (
        "values",
        wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=np.packbits(invalid, axis=-1, bitorder="little"))),
    )
    empty = mask.copy()
    empty[0, 0] = False  # a slot with no valid action
    yield "values", wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=np.packbits(empty, axis=-1, bitorder="little")))
    wide = np.ones((3, 4, 1001), bool)  # bits past A = 1000
    small = protocol.Limits(obs_shape=(8, 32, 32), num_actions=1001, masked=True, max_envs=8, max_steps=64)
    ok = np.packbits(wide, axis=-1, bitorder="little")
    assert protocol.decode_batch(wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=ok)), small) is not None
    spill = ok.copy()
    spill[0, 0, -1] |= 0x80
    yield "values", (wire(protocol.encode_batch(1, 2, 3, 4, *arrays, STATS, masks=spill)), small)
    big = list(arrays)
    big[1] = arrays[1].copy()
    big[1][0, 0] = 1024  # past the 1024 actions
    yield "values", wire(protocol.encode_batch(1, 2, 3, 4, *big, STATS, masks=packed))
    narrow = list(arrays)
    narrow[1] = arrays[1].astype(np.uint8)  # uint8 actions for 1024
    yield "dtype", wire(protocol.encode_batch(1, 2, 3, 4, *narrow, STATS, masks=packed))
    nan = list(arrays)
    nan[0] = arrays[0].astype(np.float16)
    yield "dtype", wire(protocol.encode_batch(1, 2, 3, 4, *nan, STATS, masks=packed))


@pytest.mark.parametrize("reason,parts", list(bad_masked_messages()))
def test_bad_masked_message_is_rejected_with_reason(reason, parts):
    limits = FUEL
    if isinstance(parts, tuple):
        parts, limits = parts
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_batch(parts, limits)
    assert info.value.reason == reason


def test_non_finite_float_observations_are_rejected():
    frames = np.zeros((1, 2, 14), np.float32)
    frames[0, 1, 3] = np.inf
    flags = np.zeros((1, 2), np.uint8)
    parts = wire(protocol.encode_batch(0, 1, 0, 0, frames, flags, np.zeros((1, 2), np.float32), flags, flags, STATS))
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_batch(parts, SNAKE)
    assert info.value.reason == "values"


def test_encode_refuses_unlisted_dtypes_and_shapes():
    flags = np.zeros((1, 2), np.uint8)
    rewards = np.zeros((1, 2), np.float32)
    with pytest.raises(ValueError, match="frames dtype float64"):
        protocol.encode_batch(0, 1, 0, 0, np.zeros((1, 2, 3)), flags, rewards, flags, flags, STATS)
    with pytest.raises(ValueError, match="actions must be uint8 or uint16"):
        protocol.encode_batch(0, 1, 0, 0, np.zeros((1, 2, 3), np.uint8), flags.astype(np.int32), rewards, flags, flags, STATS)
    with pytest.raises(ValueError, match="masks"):
        protocol.encode_batch(
            0, 1, 0, 0, np.zeros((1, 2, 3), np.uint8), flags, rewards, flags, flags, STATS, masks=np.zeros((1, 2, 1), bool)
        )


def test_a_held_socket_buffers_about_one_batch_and_at_most_128_kib():
    from shared.spec import EnvSpec
    from shared.wire.links import HELD_KERNEL_BUFFER, held_kernel_buffer

    # 64 steps of 8 float32s, a uint8 action, a float32 reward, terminated and first: 64 x 39 = 2,496 bytes
    corridor = EnvSpec(obs_shape=(8,), obs_dtype="float32", stack=1, num_actions=2)
    assert held_kernel_buffer(corridor, 1, 64) == 4096  # the floor
    assert held_kernel_buffer(corridor, 4, 64) == 4 * 2_496
    mario = EnvSpec(obs_shape=(84, 84), obs_dtype="uint8", stack=4, num_actions=7)
    assert held_kernel_buffer(mario, 1, 64) == HELD_KERNEL_BUFFER == 1 << 17
    limits = protocol.Limits.for_spec(corridor)  # the learner's side computes the same from its limits
    assert held_kernel_buffer(limits, 4, 64) == held_kernel_buffer(corridor, 4, 64)


def test_the_message_bound_follows_the_spec_and_the_largest_valid_batch_fits_it():
    """The learner's per-message bound is what E x T steps of this spec can take at most (issue: 64 MiB whatever the
    spec); the largest valid batch (priorities, an episode ending every step) fits it, and the data plane uses it."""
    import torch

    from learner.data_plane import DataPlane
    from shared.envs import env_spec
    from tests.support.runs import small_config

    cfg = small_config(actors=1, envs=2, steps=16, frame_size=36)
    spec = env_spec(cfg.env)
    limits = protocol.Limits.for_spec(spec, max_envs=64, max_steps=16)
    bound = limits.message_bound(2, 16)
    assert bound == 2 * 16 * (36 * 36 + 1 + 4 + 1 + 1 + 4 + 16) + protocol.HEADER_ALLOWANCE  # 16: an episode row
    shape = (2, 16)
    arrays = (np.zeros(shape + (36, 36), np.uint8), np.zeros(shape, np.uint8), np.zeros(shape, np.float32))
    arrays += (np.ones(shape, np.uint8), np.ones(shape, np.uint8))
    stats = {k: 0.0 for k in protocol.STAT_KEYS}
    parts = protocol.encode_batch(
        0, 1, 0, 0, *arrays, stats=stats, priorities=np.ones(shape, np.float32), episodes=np.zeros((32, 4), np.float32)
    )
    assert sum(memoryview(p).nbytes for p in parts) <= bound
    plane = DataPlane(cfg, spec, torch.device("cpu"))
    try:
        assert plane.consolidator.limits.max_message_bytes == min(cfg.transport.max_message_bytes, bound)
    finally:
        plane.close()
