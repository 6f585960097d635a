"""The update waits on the host at most once: sampling decides validity and IS weights from host copies of the
episode flags and of its own draw, and the priorities go back from the one copy of the update's figures. Counted on
the CPU by patching the calls that synchronize on a GPU; the results are those of the device-side algorithm."""

import numpy as np
import pytest
import torch

from learner.replay.frame_ring import FrameReplay
from learner.replay.prioritized import PrioritizedReplay
from learner.trainer import DQNLearner
from shared.config import LearnerConfig
from shared.resolution import learner_config
from shared.spec import EnvSpec
from tests.support.batches import ACTIONS, SIZE, STACK

SPEC = EnvSpec((SIZE, SIZE), "uint8", STACK, ACTIONS)
SYNCING = ("cpu", "item", "nonzero", "tolist")  # each waits for the device on a GPU


def filled(kind, n_step=3, seed=0, streams=3, length=240):
    """A replay of random episodes (terminations and truncations, so some draws have no successor)."""
    extra = {"alpha": 0.6, "eps": 1e-3} if kind is PrioritizedReplay else {}
    replay = kind(streams, streams * 256, frame_shape=(SIZE, SIZE), stack=STACK, n_step=n_step, gamma=0.9, **extra)
    rng = np.random.default_rng(seed)
    for stream in range(streams):
        first = rng.random((1, length)) < 0.08
        first[0, 0] = True
        terminated = np.zeros((1, length), bool)
        terminated[0, :-1] = first[0, 1:] & (rng.random(length - 1) < 0.5)  # half the episode ends are terminations
        replay.add(
            stream,
            rng.integers(0, 256, (1, length, SIZE, SIZE), dtype=np.uint8),
            rng.integers(0, ACTIONS, (1, length)).astype(np.uint8),
            rng.normal(size=(1, length)).astype(np.float32),
            terminated,
            first,
        )
    return replay


@pytest.fixture
def sync_calls(monkeypatch):
    """Counts of the synchronizing Tensor methods called while the fixture is active."""
    counts = dict.fromkeys(SYNCING, 0)
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize("kind", [PrioritizedReplay, FrameReplay])
def test_an_update_makes_at_most_one_synchronizing_call(kind, sync_calls):
    replay = filled(kind)
    dqn = DQNLearner(
        learner_config(LearnerConfig(micro_batch=16, accum_steps=2, compile=False, amp="off")), SPEC, torch.device("cpu")
    )
    replay.beta = 0.5
    dqn.update(replay)  # allocators and the optimizer's first step
    for name in SYNCING:
        sync_calls[name] = 0
    updates = 4
    for _ in range(updates):
        dqn.update(replay)
    assert sum(sync_calls.values()) <= updates, sync_calls
    assert sync_calls["cpu"] == updates and sync_calls["nonzero"] == 0, sync_calls  # the figures' one copy


def reference_draw(replay: FrameReplay, B: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniform draw as it was made on the device before the host mirrors: validity from the ring's own flags,
    invalid draws redrawn from the same generator."""
    lo, counts = replay._ranges(replay.heads)
    lo_t, counts_t = torch.from_numpy(lo), torch.from_numpy(counts)
    cum = torch.cumsum(counts_t, 0)
    C, n = replay.stream_capacity, replay.n_step

    def draw(k):
        u = torch.randint(int(cum[-1]), (k,), generator=generator)
        s = torch.searchsorted(cum, u, right=True)
        return s, lo_t[s] + u - (cum[s] - counts_t[s])

    def valid(s, i):
        flat = s[:, None] * C + (i[:, None] + torch.arange(n + 1)) % C
        first_w, term_w = replay._first.view(-1)[flat], replay._terminated.view(-1)[flat[:, :n]]
        ok = term_w | ~first_w[:, 1:]
        go_on = (ok & ~term_w).to(torch.int32)
        before = torch.cat([torch.ones_like(go_on[:, :1]), go_on[:, :-1]], 1)
        return (ok & torch.cumprod(before, 1).bool()).any(1)

    stream, slot = draw(B)
    while (bad := (~valid(stream, slot)).nonzero().squeeze(1)).numel():
        stream[bad], slot[bad] = draw(int(bad.numel()))
    return stream, slot


@pytest.mark.parametrize("n_step", [1, 3])
def test_host_validity_draws_what_the_device_flags_drew(n_step):
    replay = filled(FrameReplay, n_step=n_step, seed=n_step)
    for seed in range(5):
        batch = replay.sample(64, generator=torch.Generator().manual_seed(seed))
        stream, slot = reference_draw(replay, 64, torch.Generator().manual_seed(seed))
        assert torch.equal(batch["stream"], stream) and torch.equal(batch["slot"], slot)
        assert torch.equal(batch["host_stream"], stream) and torch.equal(batch["host_slot"], slot)


def test_the_priorities_written_back_are_the_sampled_batchs_td_errors():
    """Same samples, same loss, same priorities: the update's write-back equals |TD error| + eps of the batch the
    same seed draws, at the (stream, slot) that batch names."""
    replay = filled(PrioritizedReplay)
    cfg = LearnerConfig(micro_batch=32, accum_steps=1, compile=False, amp="off", lr=1e-12)
    dqn = DQNLearner(learner_config(cfg), SPEC, torch.device("cpu"), batchnorm_batch_stats=False)
    replay.beta = 0.5
    torch.manual_seed(11)
    batch = replay.sample(32, beta=0.5)
    loss, td, _ = dqn.micro_loss(batch)
    torch.manual_seed(11)
    stats = dqn.update(replay)
    assert stats.loss == pytest.approx(loss.item(), rel=1e-6)
    leaf = (batch["host_stream"] * replay.stream_capacity + batch["host_slot"] % replay.stream_capacity).numpy()
    last = dict(zip(leaf.tolist(), td.numpy().tolist()))  # a slot drawn twice keeps its last TD error
    np.testing.assert_allclose(replay._prio[list(last)], (np.array(list(last.values())) + 1e-3) ** 0.6, rtol=1e-6)
