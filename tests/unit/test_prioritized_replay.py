"""Prioritized replay: the sum tree, the sampling distribution over exactly the sampleable slots (ring
wrap-around, terminations, truncations, expired streams), priority updates, IS weights, and the actors'
n-step TD priorities against a per-transition reference."""

import numpy as np
import pytest
import torch

from learner.replay.prioritized import PrioritizedReplay
from learner.replay.sum_tree import SumTree
from shared.priorities import n_step_priorities
from shared.resolution import resolve_run
from shared.targets import MUNCHAUSEN_LOG_FLOOR, build_rule, munchausen_terms
from shared.wire.protocol import MAX_PRIORITY

H = W = 4


# --------------------------------------------------------------------------- sum tree


def test_sum_tree_finds_the_leaf_of_each_prefix_sum_and_keeps_exact_totals():
    rng = np.random.default_rng(0)
    tree = SumTree(1000)  # not a power of two: 24 padding leaves stay 0
    values = rng.random(1000) * (rng.random(1000) < 0.7)  # about 30% zero leaves
    tree.update(np.arange(1000), values)
    for _ in range(50):  # repeated overlapping updates, with repeated indices (the last one wins)
        idx = rng.integers(0, 1000, 64)
        new = rng.random(64) * (rng.random(64) < 0.8)
        tree.update(idx, new)
        values[idx] = new
        last = {int(i): v for i, v in zip(idx, new)}
        values[list(last)] = list(last.values())
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    np.testing.assert_array_equal(tree.get(np.arange(1000)), values)
    cum = np.cumsum(values)
    u = rng.random(100_000) * cum[-1]
    found = tree.find(u)
    np.testing.assert_array_equal(found, np.searchsorted(cum, u, side="right"))
    assert (values[found] > 0).all()
    edges = tree.find(np.concatenate([[0.0], cum[:-1]]))  # exactly on a boundary: never a zero leaf
    assert (values[edges] > 0).all()


# --------------------------------------------------------------------------- replay helpers


def add(replay, stream, T, start, terminated=(), truncated=(), priorities=None):
    """Write T slots to ``stream``; frame k carries its absolute slot number. ``terminated``/``truncated`` are
    absolute slots whose step ends the episode (the next slot is then a first slot)."""
    slots = np.arange(start, start + T)
    frames = np.zeros((1, T, H, W), np.uint8)
    frames[0, :, 0, 0] = slots % 256
    frames[0, :, 0, 1] = slots // 256
    term = np.isin(slots, terminated)[None]
    first = (np.isin(slots - 1, terminated) | np.isin(slots - 1, truncated))[None]
    if start == 0:
        first[0, 0] = True
    replay.add(
        stream,
        frames,
        np.zeros((1, T), np.uint8),
        np.ones((1, T), np.float32),
        term,
        first,
        None if priorities is None else np.asarray(priorities, np.float64)[None],
    )


def sampleable(replay, truncations):
    """{(stream, abs slot)} uniform replay would draw: the sampleable range minus truncation slots."""
    lo, counts = replay._ranges(replay.heads)
    return {(s, a) for s in range(replay.num_streams) for a in range(lo[s], lo[s] + counts[s]) if (s, a) not in truncations}


def test_samples_follow_priorities_exactly_over_the_sampleable_slots_across_wrap_and_episodes():
    replay = PrioritizedReplay(2, 80, frame_shape=(H, W), stack=3, n_step=2, gamma=0.9, alpha=0.7)
    rng = np.random.default_rng(1)
    p = {}  # (stream, abs slot) -> priority given at insertion
    truncations = {(0, 29), (1, 61)}
    for start in (0, 30, 60):  # 90 slots per stream in a ring of 40: it wraps twice
        for s in (0, 1):
            pr = rng.random(30) * 3
            p.update({(s, start + i): pr[i] for i in range(30)})
            add(replay, s, 30, start, terminated=[17, 45, 70], truncated=[a for (t, a) in truncations if t == s], priorities=pr)
    valid = sorted(sampleable(replay, truncations))
    assert len(valid) == 2 * (40 - 2 - 2) - 1  # stack-1 at the tail, n at the head, one truncation inside
    weight = np.array([(p[k] + replay.eps) ** 0.7 for k in valid])
    expected = weight / weight.sum()

    draws = 400_000
    batch = replay.sample(draws, generator=torch.Generator().manual_seed(0), beta=0.5)
    keys = list(zip(batch["stream"].tolist(), batch["slot"].tolist()))
    index = {k: i for i, k in enumerate(valid)}
    assert set(keys) <= set(valid), "a slot outside the sampleable set was drawn"
    counts = np.bincount([index[k] for k in keys], minlength=len(valid))
    chi2 = ((counts - draws * expected) ** 2 / (draws * expected)).sum()
    df = len(valid) - 1  # the first call is stratified, so chi2 sits well below df when the law is right
    assert chi2 < df + 5 * np.sqrt(2 * df), f"chi2 {chi2:.1f} with {df} degrees of freedom"
    # the frames are the slots drawn (frame k carries k)
    obs = batch["obs"][:, -1, 0, :2].long()
    np.testing.assert_array_equal((obs[:, 0] + 256 * obs[:, 1]).numpy() % (256 * 256), batch["slot"].numpy())
    # IS weights: (N P)^-beta over the batch maximum
    prob = expected[[index[k] for k in keys]]
    w = (len(valid) * prob) ** -0.5
    np.testing.assert_allclose(batch["weight"].numpy(), w / w.max(), rtol=1e-5)


def test_updated_priorities_move_the_distribution_and_skip_overwritten_slots():
    replay = PrioritizedReplay(1, 64, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9, alpha=1.0, eps=1e-6)
    add(replay, 0, 64, 0)  # max-priority insertion: 1.0 everywhere
    gen = torch.Generator().manual_seed(3)
    batch = replay.sample(16, generator=gen)
    np.testing.assert_allclose(batch["weight"].numpy(), 1.0)  # equal priorities: uniform, weights 1
    slots = torch.tensor([10, 20, 30])
    assert replay.update_priorities(torch.zeros(3, dtype=torch.long), slots, torch.tensor([1e-6, 1e-6, 100.0])) == 3
    assert replay.max_priority == pytest.approx(100.0 + 1e-6)
    batch = replay.sample(20_000, generator=gen)
    share = (batch["slot"] == 30).float().mean().item()
    expected = 100.0 / (100.0 + 58 * 1.0 + 2 * 2e-6)  # 61 sampleable slots (stack 2, n 1), two nearly 0
    assert share == pytest.approx(expected, abs=0.01)
    assert not ((batch["slot"] == 10) | (batch["slot"] == 20)).any()
    add(replay, 0, 32, 64)  # slots 0..31 are overwritten; new slots get the max priority
    kept = replay.update_priorities(torch.zeros(2, dtype=torch.long), torch.tensor([5, 40]), torch.tensor([7.0, 7.0]))
    assert kept == 1  # slot 5 is gone: its update must not land on slot 69, which took its place
    assert replay._prio[69 % 64] == pytest.approx(100.0 + 1e-6)  # max-priority insertion, untouched


def test_expired_stream_is_never_drawn_and_comes_back_when_its_actor_writes():
    replay = PrioritizedReplay(2, 128, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9)
    add(replay, 0, 40, 0, priorities=np.full(40, 50.0))  # a very likely stream ...
    for start in range(0, 192, 64):
        add(replay, 1, 64, start)  # ... then more than `capacity` slots elsewhere: stream 0 expires
    assert replay.live_streams() == 1
    batch = replay.sample(5000, generator=torch.Generator().manual_seed(0))
    assert (batch["stream"] == 1).all()
    add(replay, 0, 8, 40, priorities=np.full(8, 50.0))
    batch = replay.sample(5000, generator=torch.Generator().manual_seed(1))
    old = (batch["stream"] == 0) & (batch["slot"] < 40)
    assert old.float().mean() > 0.5  # its retained slots are back, with their priorities


def test_bad_priorities_are_refused_before_anything_is_written():
    replay = PrioritizedReplay(1, 64, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9)
    add(replay, 0, 16, 0)
    for bad in (np.full(8, np.nan), np.full(8, -1.0), np.ones(7)):
        with pytest.raises(ValueError, match="priorities"):
            add(replay, 0, 8, 16, priorities=bad)
    assert replay.heads.tolist() == [16]
    with pytest.raises(ValueError, match="non-finite"):
        replay.update_priorities([0], [3], [np.inf])


def test_a_batch_of_truncations_at_the_priority_bound_cannot_stop_sampling():
    """Issue 84's poisoned batch, within the wire's bounds: every step a truncation (no successor, never sampled)
    at the largest priority allowed. Its slots hold no mass; the batch's last slot, not yet sampleable, holds nearly
    all of it, so most draws fall past the rejection rounds and are made uniformly; every draw is still a
    sampleable slot of the other stream, and a priority above the bound is refused."""
    replay = PrioritizedReplay(2, 128, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9)
    add(replay, 0, 64, 0, priorities=np.full(64, 0.5))
    add(replay, 1, 32, 0, truncated=range(32), priorities=np.full(32, MAX_PRIORITY))
    leaves = replay._tree.get(64 + np.arange(32))
    np.testing.assert_array_equal(leaves[:31], 0.0)  # slots 0..30 are followed by a first frame: no mass
    assert leaves[31] == pytest.approx((MAX_PRIORITY + replay.eps) ** replay.alpha)  # its successor is not known yet
    batch = replay.sample(256, generator=torch.Generator().manual_seed(0))
    assert (batch["stream"] == 0).all()
    assert (batch["slot"] <= 62).all()  # stream 0's sampleable slots: all but the last (n 1)
    assert replay.uniform_draws > 0
    with pytest.raises(ValueError, match=r"priority 2e\+06 is above the bound 1e\+06"):
        add(replay, 0, 8, 64, priorities=np.full(8, 2e6))
    assert replay.heads.tolist() == [64, 32]


def test_a_truncation_ending_a_batch_loses_its_mass_when_the_next_batch_shows_it():
    replay = PrioritizedReplay(1, 64, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9, alpha=1.0)
    add(replay, 0, 8, 0, truncated=[7], priorities=np.full(8, 2.0))
    assert replay._tree.get(np.array([7]))[0] == pytest.approx(2.0 + replay.eps)  # its successor is not known yet
    add(replay, 0, 8, 8, truncated=[7], priorities=np.full(8, 2.0))  # slot 8 is a first frame: 7 was a truncation
    np.testing.assert_array_equal(replay._tree.get(np.array([7])), 0.0)
    assert replay._tree.total == pytest.approx(15 * (2.0 + replay.eps))


def test_uniform_is_alpha_zero_and_the_loss_weights_are_one():
    replay = PrioritizedReplay(1, 64, frame_shape=(H, W), stack=2, n_step=1, gamma=0.9, alpha=0.0)
    add(replay, 0, 64, 0, priorities=np.random.default_rng(0).random(64) * 10)
    batch = replay.sample(64, generator=torch.Generator().manual_seed(0), beta=1.0)
    np.testing.assert_allclose(batch["weight"].numpy(), 1.0)


# --------------------------------------------------------------------------- actor priorities


def reference_returns(rewards, terminated, first, next_first, n, gamma):
    """Per transition (e, t) with at least one step: (e, t, R, L, done), one at a time, straight from the n-step rule
    (learner/replay/frame_ring.py), cut at the batch end."""
    E, T = rewards.shape
    for e in range(E):
        for t in range(T):
            ret, steps, done = 0.0, 0, False
            for k in range(n):
                j = t + k
                if j >= T:
                    break
                after = first[e, j + 1] if j + 1 < T else next_first[e]
                if not terminated[e, j] and after:
                    break  # a truncation: no successor frame
                ret += gamma**k * rewards[e, j]
                steps += 1
                if terminated[e, j]:
                    done = True
                    break
            if steps:
                yield e, t, ret, steps, done


def reference_priorities(q, actions, rewards, terminated, first, next_first, n, gamma, scale):
    """|max-Q n-step TD error| per transition (0 where no step has a successor)."""
    out = np.zeros(rewards.shape)
    for e, t, ret, steps, done in reference_returns(rewards, terminated, first, next_first, n, gamma):
        boot = 0.0 if done else gamma**steps * q[e, t + steps].max()
        out[e, t] = abs(scale * ret + boot - q[e, t, actions[e, t]])
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_actor_priorities_match_the_per_transition_reference(n):
    rng = np.random.default_rng(n)
    E, T, A = 3, 40, 7
    q = rng.normal(size=(E, T + 1, A)).astype(np.float32)
    actions = rng.integers(0, A, (E, T)).astype(np.uint8)
    rewards = rng.normal(scale=5, size=(E, T)).astype(np.float32)
    terminated = (rng.random((E, T)) < 0.08).astype(np.uint8)
    first = np.zeros((E, T), np.uint8)
    first[:, 1:] = terminated[:, :-1] | (rng.random((E, T - 1)) < 0.05)  # terminations and truncations
    first[:, 0] = 1
    next_first = np.array([terminated[0, -1], 1, 0], np.uint8)  # env 1's last step was truncated
    got = n_step_priorities(q, actions, rewards, terminated, first, next_first, n, 0.9, 1 / 15)
    assert got.dtype == np.float32 and got.shape == (E, T)
    want = reference_priorities(q, actions, rewards, terminated, first, next_first, n, 0.9, 1 / 15)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got[1, -1] == 0.0  # a truncation slot


def munchausen_batch(rng, E, T, A):
    """A 2-env batch with Q near Munchausen's temperature, terminations and truncations: q, actions, rewards,
    terminated, first, next_first (env 1's last step truncated)."""
    q = rng.normal(scale=0.3, size=(E, T + 1, A)).astype(np.float32)
    actions = rng.integers(0, A, (E, T)).astype(np.uint8)
    rewards = rng.normal(scale=5, size=(E, T)).astype(np.float32)
    terminated = (rng.random((E, T)) < 0.08).astype(np.uint8)
    first = np.zeros((E, T), np.uint8)
    first[:, 1:] = terminated[:, :-1] | (rng.random((E, T - 1)) < 0.05)
    first[:, 0] = 1
    return q, actions, rewards, terminated, first, np.array([0, 1], np.uint8)


def test_actor_priorities_under_munchausen_use_the_learners_rule():
    """With Munchausen's target the actor's priority is |the learner's TD error| (shared/targets.py munchausen_terms,
    the function DQNLearner trains on) for the same Q, per transition, truncations and terminations included."""
    E, T, A, n, gamma, scale, alpha, tau = 2, 30, 7, 3, 0.9, 1 / 15, 0.9, 0.03
    q, actions, rewards, terminated, first, next_first = munchausen_batch(np.random.default_rng(7), E, T, A)
    got = n_step_priorities(
        q, actions, rewards, terminated, first, next_first, n, gamma, scale, rule=build_rule("munchausen", alpha, tau)
    )
    plain = n_step_priorities(q, actions, rewards, terminated, first, next_first, n, gamma, scale)
    here, there, taken, acts, rets, discounts, where = [], [], [], [], [], [], []
    for e, t, ret, steps, done in reference_returns(rewards, terminated, first, next_first, n, gamma):
        here.append(q[e, t]), there.append(q[e, t + steps]), acts.append(actions[e, t])
        taken.append(q[e, t, actions[e, t]]), rets.append(ret)
        discounts.append(0.0 if done else gamma**steps), where.append((e, t))
    bonus, soft = munchausen_terms(
        torch.tensor(np.array(here)),
        torch.tensor(acts, dtype=torch.long)[:, None],
        None,
        torch.tensor(np.array(there)),
        None,
        tau,
        MUNCHAUSEN_LOG_FLOOR,
    )
    target = scale * np.array(rets) + alpha * bonus.double().numpy() + np.array(discounts) * soft.double().numpy()
    want = np.zeros((E, T))
    want[tuple(np.array(where).T)] = np.abs(target - np.array(taken))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got, plain, atol=1e-3)  # the max-Q rule differs: the test can tell them apart


def test_masked_prioritized_replay_samples_weights_and_next_masks():
    """PrioritizedReplay takes the spec's shape, dtype and masks like FrameReplay."""
    rng = np.random.default_rng(2)
    A, T = 300, 32
    replay = PrioritizedReplay(
        1, 64, frame_shape=(5,), stack=1, n_step=1, gamma=0.9, obs_dtype="float32", num_actions=A, masked=True, alpha=1.0
    )
    mask = rng.random((1, T, A)) < 0.5
    actions = np.where(mask, rng.random(mask.shape), -1).argmax(2).astype(np.uint16)
    first = np.zeros((1, T), bool)
    first[0, 0] = True
    replay.add(
        0,
        rng.random((1, T, 5)).astype(np.float32),
        actions,
        np.ones((1, T), np.float32),
        np.zeros((1, T), bool),
        first,
        priorities=np.arange(T, dtype=np.float32)[None],
        masks=mask,
    )
    batch = replay.sample(64, generator=torch.Generator().manual_seed(0), beta=0.5)
    assert batch["weight"].shape == (64,) and batch["next_mask"].shape == (64, A)
    slots = batch["slot"].numpy()
    assert np.array_equal(batch["next_mask"].numpy(), mask[0, slots + 1])
    assert np.array_equal(batch["action"].numpy(), actions[0, slots])


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0])
def test_a_collectors_priorities_equal_those_from_each_ticks_own_forward_pass(epsilon):
    """Collector.collect on Catch (2 envs, stack 4): ticks where every env explored get their Q from one batched
    forward at the end of the batch, greedy ticks keep the Q they acted on; either way the priorities equal
    n_step_priorities over Q computed stack by stack from the batch's own frames (epsilon 0: every tick greedy,
    1: none, 0.5: both kinds)."""
    import torch

    from actors.collector import Collector
    from shared.config import RunConfig
    from shared.resolution import resolve_config

    cfg = RunConfig(actors=1)
    cfg.env.name, cfg.env.frame_size = "catch", 36
    cfg.actor.envs_per_actor, cfg.actor.epsilon, cfg.actor.seed = 2, epsilon, 5
    cfg.replay.prioritized = True
    cfg = resolve_config(cfg)
    collector = Collector(resolve_run(cfg, device="cpu"), 0, 1, 0)
    T, S = 24, cfg.env.stack
    batch = collector.collect(T, 0)
    frames, actions, rewards, terminated, first = batch.arrays
    E = frames.shape[0]
    stacks = np.empty((E, T + 1, S, *frames.shape[2:]), frames.dtype)
    for e in range(E):
        start = 0
        for t in range(T):
            start = t if first[e, t] else start
            picks = [max(start, t - S + 1 + i) for i in range(S)]  # the episode's reset frame repeated at its start
            stacks[e, t] = frames[e, picks]
    stacks[:, T] = collector.stacks  # the bootstrap: the stacks after the batch's last step
    with torch.inference_mode():
        q = np.stack(
            [
                np.concatenate([collector.net(torch.from_numpy(stacks[e, t : t + 1])).numpy() for t in range(T + 1)])
                for e in range(E)
            ]
        )
    r = cfg.replay
    want = n_step_priorities(q, actions, rewards, terminated, first, collector.first, r.n_step, r.gamma, collector.reward_scale)
    assert batch.priorities.shape == (E, T) and np.ptp(q, axis=1).max() > 0.1  # the stacks' Q differ
    np.testing.assert_allclose(batch.priorities, want, rtol=1e-4, atol=1e-5)
    collector.close()


def test_the_run_s_prioritized_replay_anneals_its_own_beta_over_the_budget():
    """PER owns beta's schedule: the run's replay goes from replay.priority_beta to 1 over total_env_steps, and a
    draw weights by it (the trainer passes none)."""
    from learner.data_plane import make_replay
    from shared.envs import env_spec
    from tests.support.runs import small_config

    cfg = small_config(actors=1, envs=1)
    cfg.replay.prioritized, cfg.replay.priority_beta, cfg.total_env_steps = True, 0.4, 300_000
    replay = make_replay(cfg, env_spec(cfg.env), torch.device("cpu"))
    assert isinstance(replay, PrioritizedReplay) and replay.beta == 1.0  # before the first anneal
    seen = []
    for steps in (0, 150_000, 300_000, 400_000):
        replay.anneal(steps)
        seen.append(replay.beta)
    assert seen == pytest.approx([0.4, 0.7, 1.0, 1.0])
