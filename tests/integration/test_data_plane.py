"""The data plane with real actor processes and real ZeroMQ sockets: exact accounting, hostile input,
stacks that survive the trip byte for byte (real Mario and ring wrap-around), and Snake's float features and
fuel breaks' action masks and uint16 actions landing in the replay exactly as the env produced them."""

import queue
import time

import msgpack
import numpy as np
import pytest
import torch
import zmq

from actors.collector import actor_main, env_seed
from launch.processes import spawn_context, start_process, stop_processes
from learner.data_plane import DataPlane
from learner.replay.prioritized import PrioritizedReplay
from shared.envs import env_spec, make_env, make_vector_env
from shared.envs.frames import FrameStacker
from shared.wire import protocol
from tests.support.messages import valid_batch


def run_actors(cfg, plane, max_batches, during=None, timeout=180.0):
    """Run cfg.actors real actor processes that each send ``max_batches`` batches; drain meanwhile."""
    ctx = spawn_context()
    stop, reports = ctx.Event(), ctx.Queue()
    procs = [
        start_process(ctx, actor_main, (cfg, slot, stop, reports, max_batches), f"actor-{slot}") for slot in range(cfg.actors)
    ]
    results = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) < cfg.actors and time.monotonic() < deadline:
            plane.drain(timeout=0.02)
            if during is not None:
                during()
            try:
                results.append(reports.get_nowait())
            except queue.Empty:
                pass
    finally:
        codes = stop_processes(procs, stop, timeout=20)
    assert codes == [0] * cfg.actors
    assert len(results) == cfg.actors, "an actor never reported"
    return sorted(results, key=lambda r: r["actor"])


def frame_counter(frame: torch.Tensor) -> int:
    """FakeEnv writes a uint64 frame counter into the first 8 bytes of every frame."""
    return int(np.frombuffer(frame.reshape(-1)[:8].cpu().numpy().tobytes(), "<u8")[0])


def test_every_transition_lands_exactly_once(make_config):
    cfg = make_config(actors=2, envs=2, steps=16, capacity=8192)
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=40)
        total = sum(r["sent_transitions"] for r in reports)
        assert plane.wait_for(total, timeout=30)
        plane.drain()
    finally:
        plane.close()
    assert total == 2 * 40 * 16 * 2
    assert [r["dropped_batches"] for r in reports] == [0, 0]
    stats = plane.stats()
    assert stats.processed == total == len(plane.replay)
    assert stats.per_actor == [r["sent_transitions"] for r in reports]
    assert stats.drops == 0 and stats.rejected == 0
    assert list(plane.replay.heads) == [40 * 16] * 4
    # no loss, no duplicates, in order: FakeEnv numbers every frame it makes; the terminal frame of an
    # episode is not stored (the next slot is the reset frame), so the counter advances by 2 exactly there
    for stream in range(4):
        slots = [plane.replay.slot_data(stream, k) for k in range(40 * 16)]
        counters = [frame_counter(s["frame"]) for s in slots]
        expected = [0]
        for s in slots[1:]:
            expected.append(expected[-1] + (2 if s["first"] else 1))
        assert counters == expected
        assert sum(s["first"] for s in slots) >= 3


def hostile_messages(cfg, max_bytes: int):
    """(reason, parts) pairs aimed at slot 0 while the real actors keep sending; ``max_bytes``: the learner's bound
    on one message (the run's largest valid batch, learner/data_plane.py)."""
    shape = (cfg.actor.envs_per_actor, cfg.actor.batch_steps)
    size = cfg.env.frame_size
    good = valid_batch(cfg)
    header = msgpack.unpackb(good[0])

    def with_header(**changes):
        return [msgpack.packb(dict(header, **changes)), *good[1:]]

    third = max_bytes // 3 + 1
    return [
        ("size", good[:1] + [good[1][:-1000]] + good[2:]),  # truncated frames
        ("frame_count", good[:3]),  # truncated message
        ("version", with_header(v=protocol.VERSION + 1)),
        ("shape", with_header(shape=[size + 1, size])),
        ("size", with_header(T=cfg.actor.batch_steps - 1)),  # header says other than sent
        ("field", with_header(T=cfg.actor.batch_steps + 1)),  # longer than the run's actors send
        ("dtype", with_header(dtypes=["<f4"] * 5)),
        ("oversized", [good[0]] + [b"\0" * third] * 8),  # each frame fits, the whole does not
        ("values", with_header(P=1)[:-1] + [np.full(shape, np.nan, np.float32).tobytes()]),  # NaN priorities
        ("values", with_header(P=1)[:-1] + [np.full(shape, -1.0, np.float32).tobytes()]),  # negative priorities
    ]


def test_bad_messages_are_rejected_and_counted_while_good_data_lands(make_config):
    cfg = make_config(actors=2, envs=1, steps=32, capacity=8192)
    cfg.transport.max_message_bytes = 1 << 20
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    attacker = zmq.Context.instance().socket(zmq.PUSH)
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.connect(f"tcp://127.0.0.1:{cfg.transport.base_port}")
    bad = hostile_messages(cfg, plane.consolidator.limits.max_message_bytes) * 20
    sent = []

    def attack():
        if len(sent) < len(bad):
            attacker.send_multipart(bad[len(sent)][1])
            sent.append(bad[len(sent)][0])

    try:
        reports = run_actors(cfg, plane, max_batches=30, during=attack)
        while len(sent) < len(bad):
            attack()
        total = sum(r["sent_transitions"] for r in reports)
        assert plane.wait_for(total, timeout=30)
        deadline = time.monotonic() + 60  # a hang guard
        while plane.consolidator.received < 60 + len(bad) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        attacker.close()
        plane.close()
    expected = {}
    for reason in sent:
        expected[reason] = expected.get(reason, 0) + 1
    assert dict(plane.consolidator.rejects) == expected
    assert plane.stats().per_actor == [r["sent_transitions"] for r in reports] == [30 * 32, 30 * 32]
    assert plane.processed == total


def reference_stacks(cfg, actor, env_index, actions):
    """Step a fresh env the way the actor did (its seed, the actions replay stored) and return its stacks."""
    env = make_env(cfg.env, seed=env_seed(cfg.actor.seed, actor, env_index))
    stacker = FrameStacker(cfg.env.stack, (cfg.env.frame_size, cfg.env.frame_size))
    stacker.reset(env.reset())
    stacks, rewards, ends = [], [], 0
    for action in actions:
        stacks.append(stacker.array.copy())
        frame, reward, terminated, truncated, _ = env.step(int(action))
        rewards.append(reward)
        if terminated or truncated:
            ends += 1
            stacker.reset(env.reset())
        else:
            stacker.push(frame)
    env.close()
    return stacks, rewards, ends


@pytest.mark.slow
def test_real_mario_actor_stacks_round_trip_byte_for_byte(make_config):
    """A real Mario actor process; replay's rebuilt stacks equal the env's own stacks across episode ends."""
    cfg = make_config(actors=1, envs=1, steps=32, env="mario", capacity=1024, max_episode_steps=45)
    cfg.actor.epsilon = 0.5
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=5)
        assert plane.wait_for(reports[0]["sent_transitions"], timeout=30)
    finally:
        plane.close()
    n = 5 * 32
    assert len(plane.replay) == n and reports[0]["episodes"] >= 3
    actions = [plane.replay.slot_data(0, k)["action"] for k in range(n)]
    stacks, rewards, ends = reference_stacks(cfg, 0, 0, actions)
    assert ends >= 3  # the window crosses several episode boundaries
    for k in range(n):
        got = plane.replay.stack_at(0, k).numpy()
        assert np.array_equal(got, stacks[k]), f"stack at slot {k} differs"
        assert plane.replay.slot_data(0, k)["reward"] == pytest.approx(rewards[k])


def test_stacks_survive_ring_wrap_around(make_config):
    """Fake env (its frames ignore actions), a ring much smaller than the stream: retained stacks are exact."""
    cfg = make_config(actors=1, envs=2, steps=16, capacity=2 * 80, max_episode_steps=60)
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=23)
        assert plane.wait_for(reports[0]["sent_transitions"], timeout=30)
    finally:
        plane.close()
    written = 23 * 16
    capacity = plane.replay.stream_capacity
    assert list(plane.replay.heads) == [written, written] and len(plane.replay) == 2 * capacity
    for env_index in range(2):
        stacks, _, ends = reference_stacks(cfg, 0, env_index, [0] * written)
        assert ends >= 5  # terminations (8..59 steps) and truncations (60) inside the window
        for k in range(written - capacity + cfg.env.stack - 1, written):
            assert np.array_equal(plane.replay.stack_at(env_index, k).numpy(), stacks[k]), f"env {env_index} slot {k}"


def test_actor_priorities_travel_into_prioritized_replay(make_config):
    cfg = make_config(actors=2, envs=2, steps=16, capacity=8192)
    cfg.replay.prioritized = True  # initial_priority "actor" by default: every batch carries its TD errors
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=10)
        assert plane.wait_for(sum(r["sent_transitions"] for r in reports), timeout=30)
        plane.drain()
    finally:
        plane.close()
    replay = plane.replay
    assert isinstance(replay, PrioritizedReplay) and plane.stats().rejected == 0
    held = replay._prio.reshape(replay.num_streams, -1)[:, :160]  # 10 batches x 16 steps in each of 4 streams
    assert np.isfinite(held).all() and (held > 0).all()
    assert (replay._prio.reshape(replay.num_streams, -1)[:, 160:] == 0).all()
    # the actors' own TD errors, not max-priority insertion (which would write 1.0 everywhere)
    assert len(np.unique(held)) > 100 and not np.isclose(held, 1.0).all()


# --- Snake and fuel breaks: what the replay holds equals what the env produced. Each test replays the actions the
# replay stored on a fresh vector env built with the actor's seeds (the envs are deterministic given seed and actions)
# and compares every slot's observation, reward, flags and, for fuel breaks, action mask, byte for byte.


def replay_matches_env(cfg, plane, batches):
    """Step a reference vector env with the stored actions; every stored slot must equal what it produced."""
    spec, replay = env_spec(cfg.env), plane.replay
    n_env, n = cfg.actor.envs_per_actor, batches * cfg.actor.batch_steps
    assert list(replay.heads) == [n] * n_env and plane.stats().rejected == 0
    env = make_vector_env(cfg.env, [env_seed(cfg.actor.seed, 0, e) for e in range(n_env)])
    obs, first, ends, episodes = env.reset(), np.ones(n_env, bool), 0, []
    mask = env.action_mask() if spec.masked else None
    for k in range(n):
        slots = [replay.slot_data(e, k) for e in range(n_env)]
        actions = np.array([s["action"] for s in slots])
        for e, s in enumerate(slots):
            assert s["frame"].numpy().dtype == np.dtype(spec.obs_dtype)
            assert np.array_equal(s["frame"].numpy(), obs[e]), f"env {e} slot {k}: observation differs"
            assert np.array_equal(replay.stack_at(e, k).numpy(), obs[e])  # stack 1: the input is the observation
            assert s["first"] == first[e], f"env {e} slot {k}: first flag"
            if spec.masked:
                assert np.array_equal(s["mask"].numpy(), mask[e]), f"env {e} slot {k}: action mask differs"
                assert mask[e, s["action"]], "the actor took an invalid action"
        obs, reward, term, trunc, info = env.step(actions)
        for e, s in enumerate(slots):
            assert s["reward"] == reward[e] and s["terminated"] == term[e], f"env {e} slot {k}: reward/terminated"
        first = term | trunc
        ends += int(first.sum())
        episodes += [(float(info["score"][e]), bool(info["success"][e])) for e in np.flatnonzero(first)]
        if spec.masked:
            mask = env.action_mask()
    env.close()
    return ends, episodes


def run_through_plane(cfg, batches: int) -> DataPlane:
    """Real actor processes send ``batches`` batches each over real sockets into a DataPlane; its replay after."""
    plane = DataPlane(cfg, env_spec(cfg.env), torch.device("cpu")).start()
    try:
        reports = run_actors(cfg, plane, max_batches=batches)
        assert plane.wait_for(reports[0]["sent_transitions"], timeout=30)
    finally:
        plane.close()
    return plane


@pytest.mark.timeout(180)
def test_snake_transitions_arrive_exactly(make_config):
    cfg = make_config(actors=1, envs=16, steps=32, env="snake", capacity=16 * 320, snake={"size": 6})
    cfg.replay.prioritized = True  # actor priorities travel too
    plane = run_through_plane(cfg, 8)
    assert plane.replay.obs_dtype == torch.float32 and plane.replay.frame_shape == (14,)
    ends, episodes = replay_matches_env(cfg, plane, 8)
    assert ends >= 16 and plane.episodes_total == ends  # episodes cross batch boundaries, all were reported
    window = np.array(plane.episodes)  # the learner keeps the newest 100, in the order the actor finished them
    assert np.array_equal(window[:, 1:3], np.array(episodes, np.float32)[-len(window) :])  # score, success


@pytest.mark.timeout(180)
def test_fuelbreak_transitions_and_masks_arrive_exactly(make_config):
    cfg = make_config(actors=1, envs=4, steps=8, env="fuelbreak", capacity=4 * 64, fuelbreak={"size": 16, "budget": 5})
    plane = run_through_plane(cfg, 6)
    assert plane.replay.masked and plane.replay.num_actions == 256
    ends, episodes = replay_matches_env(cfg, plane, 6)
    assert ends == 4 * (48 // 5)  # every episode ends at its budget
    assert plane.episodes_total == ends
    assert np.array_equal(np.array(plane.episodes)[:, 1:3], np.array(episodes, np.float32))  # score, success


@pytest.mark.timeout(120)
def test_fuelbreak_with_1024_actions_sends_uint16_actions(make_config):
    """The default 32x32 landscape: 1,024 actions travel as uint16 and stay exact in replay."""
    cfg = make_config(actors=1, envs=2, steps=8, env="fuelbreak", capacity=2 * 40, fuelbreak={"budget": 6})
    plane = run_through_plane(cfg, 2)
    assert plane.replay._actions.dtype == torch.int16
    ends, _ = replay_matches_env(cfg, plane, 2)
    assert ends == 2 * (16 // 6)
